"""The dashboard's HTTP side, without a browser: the page, its assets, `?max_points=`."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.web.conftest import make_record
from training_platform.api.main import create_app
from training_platform.api.routers import dashboard
from training_platform.callbacks.wire.lines import encode_record
from training_platform.settings import Settings


@pytest.fixture
def web_client(settings: Settings) -> Iterator[TestClient]:
    app = create_app(settings)
    if not any(getattr(route, "path", None) == "/" for route in app.routes):
        app.include_router(dashboard.router)  # until api/main.py includes it
    with TestClient(app) as test_client:
        yield test_client


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_page_and_its_modules_are_served_without_a_token(
    settings: Settings, web_client: TestClient
) -> None:
    page = web_client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/static/js/main.js">' in page.text
    module = web_client.get("/static/js/main.js")
    assert module.status_code == 200
    assert module.headers["content-type"].startswith("text/javascript")


def _uplot_installed() -> bool:
    return any((source / "uplot").is_dir() for source in dashboard.VENDOR_SOURCES)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_only_listed_vendor_files_are_reachable(web_client: TestClient) -> None:
    if not _uplot_installed():
        pytest.fail("uPlot not installed: run npm ci --prefix training_platform/web")
    for path in (
        "uplot/uPlot.esm.js",
        "uplot/LICENSE",
        "swagger-ui-dist/swagger-ui-bundle.js",
        "swagger-ui-dist/NOTICE",
        "redoc/redoc.standalone.js",
    ):
        assert web_client.get(f"/static/vendor/{path}").status_code == 200, path
    for path in ("uplot/package.json", "uplot/dist/uPlot.cjs.js", "../package.json", "uplot/"):
        response = web_client.get(f"/static/vendor/{path}")
        assert response.status_code == 404, path
        assert response.json()["code"] == "not_found"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_wheel_serves_its_packaged_copy_and_a_missing_one_says_how_to_fix_it(
    web_client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node_modules, vendor = tmp_path / "node_modules", tmp_path / "vendor"
    monkeypatch.setattr(dashboard, "VENDOR_SOURCES", (node_modules, vendor))
    missing = web_client.get("/static/vendor/uplot/uPlot.esm.js")
    assert missing.status_code == 404
    assert "pip install --force-reinstall training-platform" in missing.json()["detail"]
    assert "npm ci --prefix training_platform/web" in missing.json()["detail"]

    # What a wheel holds: the served files flat under vendor/{package}/.
    (vendor / "uplot").mkdir(parents=True)
    (vendor / "uplot" / "uPlot.esm.js").write_text("export default 'packaged';\n")
    packaged = web_client.get("/static/vendor/uplot/uPlot.esm.js")
    assert packaged.status_code == 200 and packaged.text == "export default 'packaged';\n"
    assert packaged.headers["content-type"].startswith("text/javascript")
    # A source checkout's node_modules, kept fresh by npm ci, comes first.
    (node_modules / "uplot" / "dist").mkdir(parents=True)
    (node_modules / "uplot" / "dist" / "uPlot.esm.js").write_text("export default 'npm';\n")
    assert web_client.get("/static/vendor/uplot/uPlot.esm.js").text == "export default 'npm';\n"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_unreadable_asset_list_is_a_404_not_a_crash(
    web_client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "package.json"
    broken.write_text("{ not json")
    monkeypatch.setattr(dashboard, "PACKAGE_JSON", broken)
    dashboard.vendor_files.cache_clear()
    try:
        assert web_client.get("/static/vendor/uplot/uPlot.esm.js").status_code == 404
        assert web_client.get("/").status_code == 200
    finally:
        monkeypatch.undo()
        dashboard.vendor_files.cache_clear()


def test_browser_assets_are_pinned_exactly_in_both_npm_files() -> None:
    manifest = json.loads((dashboard.WEB_DIR / "package.json").read_text())
    locked = json.loads((dashboard.WEB_DIR / "package-lock.json").read_text())["packages"]
    assert locked[""]["dependencies"] == manifest["dependencies"]
    for package, version in manifest["dependencies"].items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{package} {version} is not exact"
        assert locked[f"node_modules/{package}"]["version"] == version, package
    assert set(manifest["servedFiles"]) <= set(manifest["dependencies"])
    for package, files in manifest["servedFiles"].items():
        assert "LICENSE" in files, f"{package} ships without its licence"


def test_js_dev_tools_are_pinned_exactly_and_never_served() -> None:
    # ESLint & co. lint and test the dashboard's JS (docs/dashboard.md); they are
    # build-time only, so none of them may be served or copied into the wheel.
    manifest = json.loads((dashboard.WEB_DIR / "package.json").read_text())
    locked = json.loads((dashboard.WEB_DIR / "package-lock.json").read_text())["packages"]
    dev = manifest["devDependencies"]
    assert "eslint" in dev
    assert locked[""]["devDependencies"] == dev
    for package, version in dev.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{package} {version} is not exact"
        assert locked[f"node_modules/{package}"]["version"] == version, package
        assert locked[f"node_modules/{package}"]["dev"] is True, package
    assert not set(dev) & set(manifest["servedFiles"])
    assert manifest["scripts"] == {"lint": "eslint .", "test": "node --test tests/*.test.js"}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("page_path", ["/docs", "/redoc"])
def test_the_api_docs_pages_load_only_local_files(web_client: TestClient, page_path: str) -> None:
    if not _uplot_installed():
        pytest.fail("browser assets not installed: run npm ci --prefix training_platform/web")
    page = web_client.get(page_path)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    urls = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    urls += re.findall(r"url: '([^']+)'", page.text)
    assert urls and all(url.startswith("/") for url in urls), urls
    for url in urls:
        assert web_client.get(url).status_code == 200, url
    assert "http" not in page.text.replace("http-equiv", "")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    "path", ["../index.html", "..%2F..%2Fsettings.py", "%2Fetc%2Fpasswd", "js/nothing.js"]
)
def test_static_paths_cannot_leave_the_static_folder(web_client: TestClient, path: str) -> None:
    response = web_client.get(f"/static/{path}")
    assert response.status_code == 404


@pytest.fixture
def stored_run(web_client: TestClient, metrics_dir: Path) -> str:
    with (metrics_dir / "hist_metrics.jsonl").open("wb") as handle:
        for step in range(0, 400, 2):
            loss = math.nan if step == 100 else 1.0 + step / 1000
            handle.write(encode_record(make_record(step, loss={"actor_loss": loss})))
    assert web_client.post("/api/monitoring/hist/metrics/sync").json()["new_metrics"] == 200
    return "hist"


def test_max_points_answers_columnar_buckets(web_client: TestClient, stored_run: str) -> None:
    response = web_client.get(f"/api/monitoring/{stored_run}/metrics?max_points=20")

    body = json.loads(response.text, parse_constant=pytest.fail)  # standard JSON only
    assert body["downsampled"] is True and body["count"] <= 20
    assert (body["start_step"], body["end_step"]) == (0, 398)
    loss = body["series"]["loss.actor_loss"]
    assert len(loss["min"]) == len(loss["max"]) == len(loss["mean"]) == body["count"]
    assert sum(loss["nonfinite"]) == 1 and max(loss["max"]) == pytest.approx(1.398)


def test_max_points_above_the_rows_is_exact(web_client: TestClient, stored_run: str) -> None:
    body = web_client.get(
        f"/api/monitoring/{stored_run}/metrics?max_points=50&start_step=90&end_step=110"
        "&fields=loss.actor_loss,kl"
    ).json()

    assert body["downsampled"] is False and body["steps"] == list(range(90, 111, 2))
    assert set(body["series"]) == {"loss.actor_loss", "kl.mean", "kl.max"}
    assert body["series"]["loss.actor_loss"]["values"][5] == "NaN"


@pytest.mark.parametrize(
    "query",
    [
        "max_points=1",
        "max_points=0",
        "max_points=-5",
        "max_points=abc",
        "max_points=20001",
        "max_points=99999999999999999999999",
        "fields=loss",
        "max_points=10&fields=,,",
        "max_points=10&start_step=9&end_step=3",
    ],
)
def test_bad_parameters_are_422_never_500(
    web_client: TestClient, stored_run: str, query: str
) -> None:
    response = web_client.get(f"/api/monitoring/{stored_run}/metrics?{query}")
    assert response.status_code == 422, response.text
    assert set(response.json()) == {"detail", "code"}


def test_unknown_job_is_404_and_an_empty_range_is_empty(
    web_client: TestClient, stored_run: str
) -> None:
    assert web_client.get("/api/monitoring/nope/metrics?max_points=10").status_code == 404
    body = web_client.get(
        f"/api/monitoring/{stored_run}/metrics?max_points=10&start_step=5000"
    ).json()
    assert body["count"] == 0 and body["series"] == {} and body["steps"] == []
