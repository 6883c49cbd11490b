"""TLS for ``serve-web``: checking ``--ssl-certfile`` / ``--ssl-keyfile`` before anything is loaded, making a
local CA and a server certificate for the real API host names (``--make-certs DIR``), and routing requests
by the host name they were sent to, so code hard-wired to ``https://google.serper.dev``,
``https://r.jina.ai`` and ``https://s.jina.ai`` runs unchanged against the local web on one machine
(docs/serve_web.md "TLS").

The CA made by :func:`make_certs` signs one server certificate and is then thrown away: its private key is
never written, so trusting ``ca.pem`` lets nothing else be signed in its name. It also carries name
constraints (RFC 5280 4.2.1.10) limiting it to the names it was made for, in case the certificate files are
copied somewhere they should not be.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The hosted APIs whose clients the service stands in for (Serper search, Jina reader, Jina search).
REAL_HOSTS = ("google.serper.dev", "r.jina.ai", "s.jina.ai")
#: Names the server certificate holds by default: the real hosts and the loopback names.
DEFAULT_CERT_NAMES = (*REAL_HOSTS, "localhost", "127.0.0.1", "::1")
#: Host name -> route prefix of the service: Jina's reader takes the page URL as the whole path
#: (``https://r.jina.ai/https://...``), the service's reader is ``/r/<url>``; likewise Jina search
#: (``https://s.jina.ai/<query>``) and ``/s/<query>``.
HOST_PREFIXES = {"r.jina.ai": "/r", "s.jina.ai": "/s"}
#: Paths served as they are under every host name (archive entries the answers link to, the probe).
_SHARED_PREFIX, _SHARED_PATHS = "/zim/", ("/health",)
_DNS_NAME = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
CA_DAYS, CERT_DAYS = 400, 397  # a server certificate of at most 397 days is accepted by every client


class _Encrypted(Exception):
    pass


def check_tls_files(certfile: str | None, keyfile: str | None) -> None:
    """Check that ``certfile`` (PEM, the server certificate first) and ``keyfile`` (PEM, unencrypted; or
    ``None`` when the key is in ``certfile``) can serve TLS, before any archive is opened.

    Raises:
        ValueError: one line saying what is wrong: a key file without a certificate, a file that is missing,
            not a file or unreadable, not PEM, a password-protected key, or a key that is not the
            certificate's.
    """
    if keyfile and not certfile:
        raise ValueError("--ssl-keyfile needs --ssl-certfile (the certificate the key belongs to)")
    if not certfile:
        return
    texts = {}
    for flag, path in (("--ssl-certfile", certfile), ("--ssl-keyfile", keyfile)):
        if path is None:
            continue
        p = Path(path)
        if not p.exists():
            raise ValueError(f"{flag} {path}: no such file")
        if not p.is_file():
            raise ValueError(f"{flag} {path}: not a regular file")
        try:
            texts[flag] = p.read_bytes()
        except OSError as e:
            raise ValueError(f"{flag} {path}: cannot read it ({e.strerror or e})") from None
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificates(texts["--ssl-certfile"])[0]
    except ValueError:
        raise ValueError(f"--ssl-certfile {certfile}: no PEM certificate in it "
                         "(expected '-----BEGIN CERTIFICATE-----')") from None
    key_flag, key_path = ("--ssl-keyfile", keyfile) if keyfile else ("--ssl-certfile", certfile)
    try:
        key = serialization.load_pem_private_key(texts[key_flag], password=None)
    except TypeError:  # "Password was not given but private key is encrypted"
        raise ValueError(f"{key_flag} {key_path}: the key is password-protected; serve-web needs it unencrypted "
                         "(openssl pkey -in KEY -out PLAIN.pem, then keep PLAIN.pem private)") from None
    except Exception as e:  # ValueError (not a key), UnsupportedAlgorithm: any failure to read a file we did not write
        what = "no private key in it" if keyfile or b"PRIVATE KEY" not in texts[key_flag] else "unreadable key"
        raise ValueError(f"{key_flag} {key_path}: {what} (expected '-----BEGIN PRIVATE KEY-----'"
                         f"{'' if keyfile else '; pass the key with --ssl-keyfile'}); {type(e).__name__}") from None
    if key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo) != \
            cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo):
        raise ValueError(f"{key_flag} {key_path} is not the key of the certificate in --ssl-certfile {certfile} "
                         "(mismatched pair)")

    def no_password() -> str:
        raise _Encrypted

    try:  # what uvicorn will do with them: anything the checks above missed is said here, not as a traceback
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(certfile, keyfile, password=no_password)
    except (ssl.SSLError, _Encrypted, OSError) as e:
        raise ValueError(f"--ssl-certfile {certfile} / --ssl-keyfile {keyfile}: not usable for TLS "
                         f"({type(e).__name__}: {e})") from None


# ---------------------------------------------------------------------------------------------- certificates
def _split_names(names: Iterable[str]) -> tuple[list[str], list[ipaddress.IPv4Address | ipaddress.IPv6Address]]:
    dns: list[str] = []
    ips: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for raw in names:
        name = str(raw).strip().strip("[]")
        try:
            ip = ipaddress.ip_address(name)
        except ValueError:
            try:
                ascii_name = name.rstrip(".").encode("idna").decode("ascii").lower()
            except UnicodeError:
                ascii_name = ""
            if not _DNS_NAME.match(ascii_name):
                raise ValueError(f"{raw!r} is neither a host name nor an IP address") from None
            if ascii_name not in dns:
                dns.append(ascii_name)
        else:
            if ip not in ips:
                ips.append(ip)
    if not dns and not ips:
        raise ValueError("no host names to make a certificate for")
    return dns, ips


@dataclass(frozen=True)
class CertFiles:
    """What :func:`make_certs` wrote (all in one folder)."""

    ca: Path          # the local CA certificate: what clients trust
    cert: Path        # the server certificate (--ssl-certfile)
    key: Path         # its private key, mode 0600 (--ssl-keyfile)
    bundle: Path      # the system's CA certificates plus ``ca``: for variables that replace the trust store
    env: Path         # ``export`` lines of the variables below, to ``source``
    names: tuple[str, ...]

    def env_vars(self) -> dict[str, str]:
        """Variables that make common HTTP clients trust the CA (the bundle keeps every public CA trusted)."""
        return {"SSL_CERT_FILE": str(self.bundle),       # OpenSSL default paths: Python ssl/urllib, httpx, aiohttp
                "REQUESTS_CA_BUNDLE": str(self.bundle),  # requests (else its own certifi copy)
                "CURL_CA_BUNDLE": str(self.bundle),      # curl
                "NODE_EXTRA_CA_CERTS": str(self.ca)}     # Node.js: added to its built-in CAs


def _write(path: Path, data: bytes, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # also when an old temporary file was there with other bits
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _system_ca_pem() -> bytes:
    """The system's CA bundle (what OpenSSL trusts by default), or ``b""`` when there is no bundle file."""
    paths = ssl.get_default_verify_paths()
    for cafile in (paths.cafile, paths.openssl_cafile, "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                   "/etc/ssl/cert.pem"):
        if cafile and os.path.isfile(cafile):
            try:
                return Path(cafile).read_bytes()
            except OSError:
                continue
    return b""


def make_certs(folder: str | Path, names: Iterable[str] = DEFAULT_CERT_NAMES) -> CertFiles:
    """Make a local CA and a server certificate (ECDSA P-256) for ``names`` (host names and IP addresses) in
    ``folder`` (created; earlier files of this function are replaced): ``ca.pem``, ``server.pem``,
    ``server-key.pem`` (0600), ``ca-bundle.pem``, ``env.sh``. The CA's key is discarded.

    Raises:
        ValueError: a name that is neither a host name nor an IP address.
        OSError: the folder cannot be created or written.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    dns, ips = _split_names(names)
    out = Path(folder).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)  # clock skew
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "mmsearch-kit"),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"mmsearch-kit serve-web local CA {os.urandom(4).hex()}")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    permitted: list[x509.GeneralName] = [x509.DNSName(n) for n in dns]
    permitted += [x509.IPAddress(ipaddress.ip_network(ip)) for ip in ips]
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now)
          .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.NameConstraints(permitted_subtrees=permitted, excluded_subtrees=None), critical=True)
          .add_extension(ca_ski, critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "mmsearch-kit serve-web")]
                        + ([x509.NameAttribute(NameOID.COMMON_NAME, dns[0])] if dns else []))
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns] + [x509.IPAddress(ip) for ip in ips]
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
            .sign(ca_key, hashes.SHA256()))
    del ca_key  # never written: the CA can sign nothing else

    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    files = CertFiles(ca=out / "ca.pem", cert=out / "server.pem", key=out / "server-key.pem",
                      bundle=out / "ca-bundle.pem", env=out / "env.sh",
                      names=tuple(dns) + tuple(str(ip) for ip in ips))
    _write(files.key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()), 0o600)
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM))
    _write(files.ca, ca_pem)
    system = _system_ca_pem()
    _write(files.bundle, system + (b"" if not system or system.endswith(b"\n") else b"\n") + ca_pem)
    _write(files.env, ("# source this file in the shell of the client (python -m kit.cli serve-web --make-certs)\n"
                       + "".join(f"export {k}={_sh(v)}\n" for k, v in files.env_vars().items())).encode())
    return files


def _sh(text: str) -> str:
    return text if re.fullmatch(r"[A-Za-z0-9_./:@%+=,-]+", text) else "'" + text.replace("'", "'\\''") + "'"


def recipe(files: CertFiles) -> str:
    """The text ``--make-certs`` prints: the files, the ``/etc/hosts`` line, the serve command, the
    variables and a ``curl`` check."""
    hosts = [n for n in files.names if n in REAL_HOSTS] or [n for n in files.names if not _is_ip(n)]
    d = files.ca.parent
    env = files.env_vars()
    width = max(len(f"export {k}={_sh(v)}") for k, v in env.items())
    lines = [
        f"serve-web: wrote a local CA and a server certificate for {', '.join(files.names)} to {d}",
        f"  {files.ca.name:<15} the local CA: what clients trust (its key was not kept: it can sign nothing else)",
        f"  {files.cert.name:<15} the server certificate   -> --ssl-certfile",
        f"  {files.key.name:<15} its private key (0600)  -> --ssl-keyfile",
        f"  {files.bundle.name:<15} the system's CAs + ca.pem (for variables that replace the trust store)",
        f"  {files.env.name:<15} the variables below, to source",
        "",
        "1. Point the host names at this machine: add this line to /etc/hosts (as root; remove it to reach the",
        "   real services again):",
        "",
        f"127.0.0.1 {' '.join(hosts)}",
        "",
        "2. Serve on port 443 (a port below 1024 needs root, or once: sudo sysctl -w net.ipv4.ip_unprivileged_port_start=443):",
        "",
        f"python -m kit.cli serve-web ZIM... --port 443 --ssl-certfile {_sh(str(files.cert))} "
        f"--ssl-keyfile {_sh(str(files.key))} --public-url https://{hosts[0] if hosts else 'localhost'}",
        "",
        f"3. In the client's shell (or: source {_sh(str(files.env))}):",
        "",
        *(f"{f'export {k}={_sh(v)}':<{width}}  # {_ENV_WHO[k]}" for k, v in env.items()),
        "",
        "4. Check:",
        "",
        f"curl --cacert {_sh(str(files.ca))} https://google.serper.dev/search -H 'Content-Type: application/json' "
        "-d '{\"q\": \"Ray Charles\", \"num\": 3}'",
        f"curl --cacert {_sh(str(files.ca))} https://r.jina.ai/https://en.wikipedia.org/wiki/Ray_Charles",
    ]
    return "\n".join(lines) + "\n"


_ENV_WHO = {"SSL_CERT_FILE": "Python ssl/urllib, httpx, aiohttp, OpenSSL tools",
            "REQUESTS_CA_BUNDLE": "requests", "CURL_CA_BUNDLE": "curl",
            "NODE_EXTRA_CA_CERTS": "Node.js (added to its own CAs)"}


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------------- host routing
def _host(scope: dict[str, Any]) -> str:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"host":
            host = value.decode("latin-1").strip().lower()
            if host.startswith("["):  # an IPv6 literal: never one of HOST_PREFIXES
                return host
            return host.rsplit(":", 1)[0].rstrip(".")
    return ""


def route_by_host(app: Any, prefixes: dict[str, str] | None = None) -> Any:
    """ASGI wrapper: a request sent to one of ``prefixes``' host names (default :data:`HOST_PREFIXES`) is
    served by that prefix's route, so ``GET https://r.jina.ai/https://en.wikipedia.org/wiki/X`` is the
    service's ``GET /r/https://en.wikipedia.org/wiki/X``. Archive entries (``/zim/...``), ``/health`` and
    paths already under the prefix pass unchanged; every other host name (``google.serper.dev``, the
    service's own) reaches ``app`` as it is."""
    table = {h.lower(): p.rstrip("/") for h, p in (HOST_PREFIXES if prefixes is None else prefixes).items()}

    async def routed(scope, receive, send):
        if scope.get("type") in ("http", "websocket") and table:
            prefix = table.get(_host(scope))
            path = scope.get("path", "")
            if prefix and not path.startswith((f"{prefix}/", _SHARED_PREFIX)) and path not in _SHARED_PATHS:
                raw = scope.get("raw_path") or path.encode("utf-8")
                scope = dict(scope, path=prefix + path, raw_path=prefix.encode() + raw)
        return await app(scope, receive, send)

    return routed


__all__ = ["DEFAULT_CERT_NAMES", "HOST_PREFIXES", "REAL_HOSTS", "CertFiles", "check_tls_files", "make_certs", "recipe",
           "route_by_host"]
