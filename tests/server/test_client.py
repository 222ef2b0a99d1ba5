"""``sattr show`` / ``list`` / ``report`` through a real ``sattr serve`` (uvicorn on a loopback
port, in a thread) with real MUNGE credentials, and the server's configuration checks."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from attribution.cli import main
from attribution.config import Config, parse_config
from attribution.errors import ConfigError
from attribution.server.app import create_app
from attribution.store import Store, VerdictFilter
from tests.server.conftest import free_port, uvicorn_serving
from tests.server.test_api import munge_needed


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"listen": "8080"}, "listen must be ADDRESS:PORT"),
        ({"listen": "0.0.0.0:99999"}, "listen must be ADDRESS:PORT"),
        ({"url": "attr.example.org"}, "url must start with http"),
        ({"tls_cert": "/etc/x.crt"}, "tls_cert and tls_key go together"),
        ({"proxy_header": "X Remote User"}, "a header name is letters"),
        ({"diagnose_slots": 0}, "diagnose_slots"),
        ({"bogus": 1}, "unknown key 'server.bogus'"),
    ],
)
def test_bad_server_settings_are_one_line_errors(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"server": settings}, "config.yaml")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_server_settings_defaults_and_ipv6() -> None:
    server = Config().server
    assert server.address == ("127.0.0.1", 8080)
    assert server.url is None and server.proxy_header is None and server.munge
    ipv6 = parse_config({"server": {"listen": "[::1]:9000", "url": "http://h:1/"}}, "c").server
    assert ipv6.address == ("::1", 9000)
    assert ipv6.url == "http://h:1"


@pytest.fixture(scope="module")
def served(demo_store: Any) -> Iterator[str]:
    """The demo store behind a real uvicorn on a free loopback port; yields its URL."""
    with uvicorn_serving(create_app(Config(), demo_store.db, None, token=None)) as url:
        yield url


def client_config(tmp_path: Path, url: str, **server: Any) -> Path:
    """A configuration whose store is not there (a login node) and whose server is ``url``."""
    path = tmp_path / "config.yaml"
    path.write_text(
        json.dumps({"store": str(tmp_path / "no-store.sqlite"), "server": {"url": url, **server}})
    )
    return path


@munge_needed
def test_show_list_and_report_through_the_server(
    served: str, demo_store: Any, tmp_path: Path
) -> None:
    config = client_config(tmp_path, served)
    with Store(demo_store.db, readonly=True) as store:
        rows = store.query(VerdictFilter(sub_domain="hardware"))
        expected = store.find(rows[0]["display_id"])[0]
        everything = store.count()
    job = rows[0]["display_id"]
    runner = CliRunner()
    shown = runner.invoke(main, ["show", job, "--json", "--config", str(config)])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output)
    record = data.pop("record")
    assert data == expected  # the stored verdict, whole
    assert record["server"] == served
    human = runner.invoke(main, [job, "--config", str(config)])
    assert human.exit_code == 0, human.output
    assert f"(from the server at {served})" in human.output
    listed = runner.invoke(
        main, ["list", "--json", "--since", "all", "--limit", "1500", "--config", str(config)]
    )
    assert listed.exit_code == 0, listed.output
    assert len(json.loads(listed.output)) == everything  # pages followed to the end
    narrowed = runner.invoke(
        main,
        ["list", "--json", "--since", "all", "--sub-domain", "hardware", "--config", str(config)],
    )
    assert [r["key"] for r in json.loads(narrowed.output)] == [r["key"] for r in rows]
    report = runner.invoke(main, ["report", job, "--config", str(config)])
    assert report.exit_code == 0, report.output
    assert job in report.output.splitlines()[0]
    assert f"{served}/jobs/{job}" in report.output  # the job's page on the server
    missing = runner.invoke(main, ["show", "424242424", "--config", str(config)])
    assert missing.exit_code == 1
    assert "no verdict for job 424242424" in missing.output


@munge_needed
def test_tls_with_the_sites_own_ca(demo_store: Any, tmp_path: Path) -> None:
    """A server certificate from a CA of the site's: refused until server.ca_file names it."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    app = create_app(Config(), demo_store.db, None, token=None)
    with uvicorn_serving(app, ssl_keyfile=str(key), ssl_certfile=str(cert)) as url:
        with Store(demo_store.db, readonly=True) as store:
            job = store.query(VerdictFilter(limit=1))[0]["display_id"]
        refused = CliRunner().invoke(main, [job, "--config", str(client_config(tmp_path, url))])
        assert refused.exit_code == 1
        assert "CERTIFICATE_VERIFY_FAILED" in refused.output
        trusted = client_config(tmp_path, url, ca_file=str(cert))
        shown = CliRunner().invoke(main, [job, "--json", "--config", str(trusted)])
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.output)["record"]["server"] == url
        bad = client_config(tmp_path, url, ca_file=str(key.parent / "absent.pem"))
        missing = CliRunner().invoke(main, [job, "--config", str(bad)])
        assert missing.exit_code == 1
        assert "server.ca_file" in missing.output


def test_an_unreachable_server_is_a_one_line_error(tmp_path: Path) -> None:
    port = free_port()  # closed again: nothing listens there
    config = client_config(tmp_path, f"http://127.0.0.1:{port}")
    result = CliRunner().invoke(main, ["show", "1234", "--config", str(config)])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "job 1234" in lines[0]


def test_a_bad_listen_option_names_the_problem() -> None:
    result = CliRunner().invoke(main, ["serve", "--listen", "8080"])
    assert result.exit_code == 2
    assert "listen must be ADDRESS:PORT" in result.output
    assert "pydantic" not in result.output
