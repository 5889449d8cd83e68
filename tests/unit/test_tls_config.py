"""TLS settings without a running service: scripts/make-certs.sh's CA and certificates, the
three variables all or none, files that cannot be used, and a scheme that disagrees."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from api.peers import PeerClient, client_ssl_context
from common.errors import InvalidInput
from services.http import ServerTLS, check_scheme, server_tls_from_env

ROOT = Path(__file__).resolve().parents[2]
MAKE_CERTS = ROOT / "scripts" / "make-certs.sh"

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="scripts/make-certs.sh needs the openssl command")


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("certs") / "tls"
    subprocess.run(["bash", str(MAKE_CERTS), str(folder), "gm-1", "lm-1"], check=True,
                   capture_output=True, timeout=60)
    return folder


def env(certs: Path, name: str = "gm-1") -> dict[str, str]:
    return {"MEGHA_TLS_CERT": str(certs / f"{name}.pem"),
            "MEGHA_TLS_KEY": str(certs / f"{name}.key"), "MEGHA_TLS_CA": str(certs / "ca.pem")}


def test_make_certs_makes_a_ca_and_certificates_for_the_name_localhost_and_loopback(certs):
    assert {p.name for p in certs.iterdir()} == {
        ".gitignore", "ca.pem", "ca.key", "gm-1.pem", "gm-1.key", "lm-1.pem", "lm-1.key"}
    assert (certs / "gm-1.key").stat().st_mode & 0o077 == 0  # the owner's alone
    text = subprocess.run(["openssl", "x509", "-in", str(certs / "gm-1.pem"), "-noout",
                           "-ext", "subjectAltName"], capture_output=True, text=True,
                          check=True).stdout
    assert "DNS:gm-1, DNS:localhost, IP Address:127.0.0.1" in text
    before = (certs / "gm-1.pem").read_bytes()
    again = subprocess.run(["bash", str(MAKE_CERTS), str(certs), "gm-1", "gm-2"],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and (certs / "gm-1.pem").read_bytes() == before  # kept
    verified = subprocess.run(["openssl", "verify", "-CAfile", str(certs / "ca.pem"),
                               str(certs / "gm-2.pem")], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stderr  # the same CA signed the newcomer
    for bad in (["lm-1/w0"], []):
        refused = subprocess.run(["bash", str(MAKE_CERTS), str(certs), *bad],
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2, refused.stderr
    assert "'lm-1/w0' is not a host name" in subprocess.run(
        ["bash", str(MAKE_CERTS), str(certs), "lm-1/w0"], capture_output=True,
        text=True).stderr


def test_all_three_or_none(certs) -> None:
    assert server_tls_from_env({}) is None
    full = env(certs)
    assert server_tls_from_env(full) == ServerTLS(full["MEGHA_TLS_CERT"], full["MEGHA_TLS_KEY"],
                                                  full["MEGHA_TLS_CA"])
    with pytest.raises(InvalidInput) as refused:
        server_tls_from_env({"MEGHA_TLS_CERT": full["MEGHA_TLS_CERT"]})
    assert str(refused.value).startswith(
        "MEGHA_TLS_KEY: is not set, but MEGHA_TLS_CERT is: a service with TLS needs "
        "MEGHA_TLS_CERT, MEGHA_TLS_KEY, MEGHA_TLS_CA")
    with pytest.raises(InvalidInput, match="MEGHA_TLS_CA: is not set, but MEGHA_TLS_CERT, "
                                           "MEGHA_TLS_KEY are"):
        server_tls_from_env({**full, "MEGHA_TLS_CA": ""})


def test_files_that_cannot_serve_are_named(certs, tmp_path) -> None:
    full = env(certs)
    missing = str(tmp_path / "nope.pem")
    with pytest.raises(InvalidInput, match=f"MEGHA_TLS_CERT: cannot read {missing}: No such"):
        server_tls_from_env({**full, "MEGHA_TLS_CERT": missing})
    with pytest.raises(InvalidInput, match="MEGHA_TLS_KEY: .*lm-1.key and MEGHA_TLS_CERT "
                                           ".*gm-1.pem do not make a PEM key and its "
                                           "certificate"):
        server_tls_from_env({**full, "MEGHA_TLS_KEY": str(certs / "lm-1.key")})
    with pytest.raises(InvalidInput, match=f"MEGHA_TLS_CA: cannot load {missing} as a PEM CA"):
        server_tls_from_env({**full, "MEGHA_TLS_CA": missing})
    with pytest.raises(InvalidInput, match="MEGHA_TLS_CA: cannot load .*gm-1.key as a PEM CA"):
        client_ssl_context({"MEGHA_TLS_CA": str(certs / "gm-1.key")})


def test_the_own_address_says_what_the_service_serves(certs) -> None:
    tls = server_tls_from_env(env(certs))
    check_scheme("gm-1", "https://127.0.0.1:1", tls)
    check_scheme("gm-1", "http://127.0.0.1:1", None)
    with pytest.raises(InvalidInput, match="MEGHA_ENDPOINTS: gives 'gm-1' the address "
                                           "http://127.0.0.1:1, but MEGHA_TLS_CERT is set"):
        check_scheme("gm-1", "http://127.0.0.1:1", tls)
    with pytest.raises(InvalidInput, match="MEGHA_TLS_CERT: is not set, but MEGHA_ENDPOINTS "
                                           "gives 'gm-1' the address https://"):
        check_scheme("gm-1", "https://127.0.0.1:1", None)


def test_a_client_verifies_against_the_ca_it_is_given(certs, monkeypatch) -> None:
    context = client_ssl_context({"MEGHA_TLS_CA": str(certs / "ca.pem")})
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert client_ssl_context({}) is None
    monkeypatch.setenv("MEGHA_TLS_CA", str(certs / "ca.pem"))
    assert PeerClient()._ssl is not None  # read where the client is made: services, replay
    monkeypatch.setenv("MEGHA_TLS_CA", str(certs / "missing.pem"))
    with pytest.raises(InvalidInput, match="MEGHA_TLS_CA: cannot load"):
        PeerClient()
