"""The dashboard: the page at `/` and its assets, served by the API process itself.

No build step and no CDN (training machines are often offline): the page is
plain ES modules from `training_platform/web/static/`, and the one
third-party library, uPlot, comes from the npm registry into
`training_platform/web/node_modules/` (`npm ci --prefix training_platform/web`,
run by scripts/setup.sh) and is served from there. Only the files listed in
`VENDOR_FILES` are reachable under `/static/vendor/`, never the rest of
node_modules.

The page and assets need no token: they hold no data. The page asks for the
API token when `/api` answers 401 and sends it with every call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, HTMLResponse

WEB_DIR: Final = Path(__file__).resolve().parents[2] / "web"
STATIC_DIR: Final = WEB_DIR / "static"
# URL name -> file inside node_modules (what the page imports, nothing else).
VENDOR_FILES: Final = {
    "uplot/uPlot.esm.js": "uplot/dist/uPlot.esm.js",
    "uplot/uPlot.min.css": "uplot/dist/uPlot.min.css",
}
_MEDIA_TYPES: Final = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".html": "text/html; charset=utf-8",
}
# Revalidate every time (cheap: ETag/Last-Modified answer 304), so an upgraded
# server never runs against a stale cached module.
_HEADERS: Final = {"Cache-Control": "no-cache"}

router = APIRouter(include_in_schema=False)


def _not_found(detail: str) -> HTTPException:
    # An HTTPException gets the usual {"detail", "code": "not_found"} body.
    return HTTPException(status_code=404, detail=detail)


@router.get("/", response_class=HTMLResponse)
def index() -> FileResponse:
    return FileResponse(WEB_DIR / "index.html", media_type=_MEDIA_TYPES[".html"], headers=_HEADERS)


@router.get("/static/vendor/{name:path}")
def vendor_asset(name: str) -> FileResponse:
    relative = VENDOR_FILES.get(name)
    if relative is None:
        raise _not_found(f"no vendored asset {name!r}")
    path = WEB_DIR / "node_modules" / relative
    if not path.is_file():
        raise _not_found(
            f"{name} is not installed: run `npm ci --prefix training_platform/web` "
            "(scripts/setup.sh does)"
        )
    return _file(path)


@router.get("/static/{path:path}")
def static_asset(path: str) -> FileResponse:
    # resolve() then a containment check: no `..`, absolute path or symlink
    # can reach outside static/.
    target = (STATIC_DIR / path).resolve()
    if not target.is_relative_to(STATIC_DIR) or not target.is_file():
        raise _not_found(f"no dashboard asset {path!r}")
    return _file(target)


def _file(path: Path) -> FileResponse:
    media_type = _MEDIA_TYPES.get(path.suffix, "application/octet-stream")
    return FileResponse(path, media_type=media_type, headers=_HEADERS)
