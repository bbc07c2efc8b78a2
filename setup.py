"""The two build steps pyproject.toml cannot declare; everything else is in pyproject.toml.

1. The Alembic scripts stay at the top of the repository (`migrations/`, next
   to `alembic.ini`, where people look for them) and ship inside the wheel as
   `training_platform/_migrations/`: a `package_dir` mapping, not a copy.
2. The browser assets (uPlot for the dashboard, Swagger UI and ReDoc for
   `/docs` and `/redoc`) are pinned exactly in `training_platform/web/package.json`
   and `package-lock.json`. Building a wheel or an sdist copies exactly the
   files listed under `servedFiles` (licences included) from `node_modules/`
   into the git-ignored `training_platform/web/vendor/`, which the package data
   picks up, running `npm ci` first when node_modules does not hold the pinned
   versions. npm is a build-time tool only: an sdist carries the copied files,
   so building a wheel from it needs no npm, and nothing needs npm at run time.
   An editable install skips the copy: a source checkout serves node_modules.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
WEB = ROOT / "training_platform" / "web"
VENDOR = WEB / "vendor"
# Written last into vendor/: which versions the copied files are.
STAMP_NAME = "versions.json"


class VendorError(RuntimeError):
    """The pinned browser assets cannot be put into the package."""


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def pinned_assets() -> dict[str, tuple[str, list[str]]]:
    """npm package -> (its exact pinned version, the files of it the server serves)."""
    manifest = _read_json(WEB / "package.json")
    locked = _read_json(WEB / "package-lock.json")["packages"]
    assets: dict[str, tuple[str, list[str]]] = {}
    names: set[str] = set()
    for package, files in manifest["servedFiles"].items():
        wanted = manifest["dependencies"].get(package)
        version = locked.get(f"node_modules/{package}", {}).get("version")
        if wanted is None or wanted != version:
            raise VendorError(
                f"{package}: package.json asks for {wanted!r} but package-lock.json has "
                f"{version!r}; pin it exactly (npm install --save-exact {package}@VERSION "
                "--prefix training_platform/web) and commit both files"
            )
        served = {f"{package}/{Path(file).name}" for file in files}
        if len(served) != len(files) or served & names:
            raise VendorError(f"{package}: two served files share a name: {files}")
        names |= served
        assets[package] = (version, files)
    return assets


def _installed_version(package: str) -> str | None:
    path = WEB / "node_modules" / package / "package.json"
    return _read_json(path).get("version") if path.is_file() else None


def _vendor_is_current(assets: dict[str, tuple[str, list[str]]]) -> bool:
    stamp = VENDOR / STAMP_NAME
    if not stamp.is_file() or _read_json(stamp) != {p: v for p, (v, _) in assets.items()}:
        return False
    return all(
        (VENDOR / package / Path(file).name).is_file()
        for package, (_, files) in assets.items()
        for file in files
    )


def _npm_ci() -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise VendorError(
            "building training-platform needs npm to fetch its pinned browser assets "
            "(training_platform/web/package-lock.json): install Node.js and npm, "
            "or build from an sdist, which carries them"
        )
    # --ignore-scripts: only files are copied out, so no package's install script runs;
    # --omit=dev: the dashboard's lint and test tools are not needed to build.
    subprocess.run(
        [
            npm, "ci", "--prefix", str(WEB), "--omit=dev",
            "--ignore-scripts", "--no-audit", "--no-fund",
        ],
        check=True,
    )  # fmt: skip


def stage_vendor_assets() -> None:
    """Make training_platform/web/vendor/ hold exactly the pinned served files."""
    assets = pinned_assets()
    if _vendor_is_current(assets):
        return
    if any(_installed_version(p) != v for p, (v, _) in assets.items()):
        _npm_ci()
    for package, (version, files) in assets.items():
        installed = _installed_version(package)
        if installed != version:
            raise VendorError(f"npm ci left {package} {installed}, not the pinned {version}")
        for file in files:
            if not (WEB / "node_modules" / package / file).is_file():
                raise VendorError(f"{package} {version} has no {file}: fix servedFiles")
    # Filled aside, then swapped in: an interrupted build never leaves a
    # half-filled vendor/ behind a valid stamp.
    staging = Path(tempfile.mkdtemp(prefix=".vendor-", dir=WEB))
    try:
        for package, (_, files) in assets.items():
            (staging / package).mkdir()
            for file in files:
                shutil.copy2(WEB / "node_modules" / package / file, staging / package)
        versions = {p: v for p, (v, _) in assets.items()}
        (staging / STAMP_NAME).write_text(json.dumps(versions, indent=2) + "\n")
        shutil.rmtree(VENDOR, ignore_errors=True)
        staging.rename(VENDOR)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class BuildPyWithAssets(build_py):
    def run(self) -> None:
        if not self.editable_mode:
            stage_vendor_assets()
            # build_py lists its data files lazily and may have done so already.
            self.data_files = self._get_data_files()
        super().run()


class SdistWithAssets(sdist):
    def run(self) -> None:
        stage_vendor_assets()
        super().run()


setup(
    packages=[
        *find_packages(include=["training_platform", "training_platform.*"]),
        "training_platform._migrations",
        "training_platform._migrations.versions",
    ],
    package_dir={"training_platform._migrations": "migrations"},
    cmdclass={"build_py": BuildPyWithAssets, "sdist": SdistWithAssets},
)
