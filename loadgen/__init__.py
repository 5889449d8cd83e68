"""The load generator: trace readers, workload fitting and open-loop HTTP replay."""
