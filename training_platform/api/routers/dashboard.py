"""The dashboard (`/`), the API docs (`/docs`, `/redoc`) and their assets, served by the API.

No CDN (training machines are often offline) and no build step for our own
code: the page is plain ES modules from `training_platform/web/static/`. The
third-party browser assets (uPlot for the charts, Swagger UI and ReDoc for
the docs pages) are pinned exactly in `training_platform/web/package.json` and
`package-lock.json`, and only the files listed there under `servedFiles` are
reachable under `/static/vendor/{package}/{file name}`, looked up in:

1. `web/node_modules/{package}/...`: a source checkout, after
   `npm ci --prefix training_platform/web` (scripts/setup.sh runs it whenever
   the lock file changes, so it is the freshest copy there);
2. `web/vendor/{package}/...`: what a wheel carries, copied at build time by
   setup.py from those same pinned packages.

A missing asset is a 404 that says how to fix it, and the page degrades
visibly (main.js): no chart library, no charts, but everything else works.

The page, the docs pages and assets need no token: they hold no data. The page
asks for the API token when `/api` answers 401 and sends it with every call.
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path, PurePosixPath
from typing import Final

from fastapi import APIRouter, HTTPException, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import FileResponse, HTMLResponse

logger = logging.getLogger(__name__)

WEB_DIR: Final = Path(__file__).resolve().parents[2] / "web"
STATIC_DIR: Final = WEB_DIR / "static"
# Where vendor assets are looked for, in order (see the module docstring).
VENDOR_SOURCES: Final = (WEB_DIR / "node_modules", WEB_DIR / "vendor")
PACKAGE_JSON: Final = WEB_DIR / "package.json"
MISSING_ASSET_FIX: Final = (
    "reinstall the package (pip install --force-reinstall training-platform), "
    "or in a source checkout run `npm ci --prefix training_platform/web` (scripts/setup.sh does)"
)
_MEDIA_TYPES: Final = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".html": "text/html; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    "": "text/plain; charset=utf-8",  # LICENSE, NOTICE
}
# Revalidate every time (cheap: ETag/Last-Modified answer 304), so an upgraded
# server never runs against a stale cached module.
_HEADERS: Final = {"Cache-Control": "no-cache"}
# The docs pages may load nothing from off this server: the browser enforces
# it. (ReDoc 2 always shows Redocly's logo from their CDN; refused, it simply
# does not show.) Inline scripts and styles are how both pages are built.
DOCS_CSP: Final = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; "
    "connect-src 'self'; frame-ancestors 'self'"
)
_VENDOR: Final = "/static/vendor"
_FAVICON: Final = "/static/favicon.svg"

router = APIRouter(include_in_schema=False)


@functools.cache
def vendor_files() -> dict[str, tuple[str, str]]:
    """URL name ("uplot/uPlot.esm.js") -> (npm package, its path inside the package).

    Read from package.json's `servedFiles`, the list setup.py copies into the
    wheel. Unreadable, it is an empty list: every vendor asset answers 404 and
    the page says so, rather than the server refusing to start.
    """
    try:
        served = json.loads(PACKAGE_JSON.read_text(encoding="utf-8"))["servedFiles"]
        return {
            f"{package}/{PurePosixPath(path).name}": (package, path)
            for package, paths in served.items()
            for path in paths
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        logger.error("cannot read the served vendor files from %s: %s", PACKAGE_JSON, exc)
        return {}


def _not_found(detail: str) -> HTTPException:
    # An HTTPException gets the usual {"detail", "code": "not_found"} body.
    return HTTPException(status_code=404, detail=detail)


@router.get("/", response_class=HTMLResponse)
def index() -> FileResponse:
    return FileResponse(WEB_DIR / "index.html", media_type=_MEDIA_TYPES[".html"], headers=_HEADERS)


@router.get("/static/vendor/{name:path}")
def vendor_asset(name: str) -> FileResponse:
    entry = vendor_files().get(name)
    if entry is None:
        raise _not_found(f"no vendored asset {name!r}")
    package, path = entry
    candidates = (
        VENDOR_SOURCES[0] / package / path,
        VENDOR_SOURCES[1] / package / PurePosixPath(path).name,
    )
    for candidate in candidates:
        if candidate.is_file():
            return _file(candidate)
    raise _not_found(f"{name} is missing from this installation: {MISSING_ASSET_FIX}")


@router.get("/static/{path:path}")
def static_asset(path: str) -> FileResponse:
    # resolve() then a containment check: no `..`, absolute path or symlink
    # can reach outside static/.
    try:
        target = (STATIC_DIR / path).resolve()
        found = target.is_relative_to(STATIC_DIR) and target.is_file()
    except (OSError, ValueError):  # a name over 255 bytes (ENAMETOOLONG), a NUL byte
        found = False
    if not found:
        raise _not_found(f"no dashboard asset {path[:200]!r}")
    return _file(target)


# FastAPI's own /docs and /redoc (turned off in create_app) load their scripts
# from a CDN and so are blank offline; these load the same pinned files locally.
@router.get("/docs", response_class=HTMLResponse)
def swagger_ui(request: Request) -> HTMLResponse:
    root = _root_path(request)
    page = get_swagger_ui_html(
        openapi_url=root + (request.app.openapi_url or "/openapi.json"),
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{root}{_VENDOR}/swagger-ui-dist/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{_VENDOR}/swagger-ui-dist/swagger-ui.css",
        swagger_favicon_url=root + _FAVICON,
        oauth2_redirect_url=f"{root}/docs/oauth2-redirect",
        # The validator badge would send the schema's URL to swagger.io.
        swagger_ui_parameters={"validatorUrl": None},
    )
    page.headers["Content-Security-Policy"] = DOCS_CSP
    return page


@router.get("/docs/oauth2-redirect", response_class=HTMLResponse)
def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc", response_class=HTMLResponse)
def redoc(request: Request) -> HTMLResponse:
    root = _root_path(request)
    page = get_redoc_html(
        openapi_url=root + (request.app.openapi_url or "/openapi.json"),
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}{_VENDOR}/redoc/redoc.standalone.js",
        redoc_favicon_url=root + _FAVICON,
        with_google_fonts=False,
    )
    page.headers["Content-Security-Policy"] = DOCS_CSP
    return page


def _root_path(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _file(path: Path) -> FileResponse:
    media_type = _MEDIA_TYPES.get(path.suffix, "application/octet-stream")
    return FileResponse(path, media_type=media_type, headers=_HEADERS)
