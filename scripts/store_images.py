"""Write the images of the shipped profile stores (``profiles/images``), removing stale ones.

``ProfileStore.open`` reads a store's image instead of parsing its HDF5 file when it finds
one named by the file's SHA-256 (``core.store.profile_store``): in the user's cache, or here for
the stores the package ships, so that even the first ``vtrain simulate`` after installing
needs no HDF5. Run this after changing a file in ``profiles/`` (a test fails until then):

    python scripts/store_images.py
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.store.image import SHIPPED_IMAGES, image_name  # noqa: E402
from core.store.profile_store import ProfileStore  # noqa: E402


def main() -> int:
    SHIPPED_IMAGES.mkdir(exist_ok=True)
    wanted = set()
    for path in sorted((ROOT / "profiles").glob("*.h5")):
        data = path.read_bytes()
        name = image_name(hashlib.sha256(data).hexdigest())
        wanted.add(name)
        target = SHIPPED_IMAGES / name
        if not target.exists():
            target.write_bytes(ProfileStore._parse(path, data).to_image())
            print(f"wrote {target.relative_to(ROOT)} for {path.name}")
    for old in SHIPPED_IMAGES.glob("*.img"):
        if old.name not in wanted:
            old.unlink()
            print(f"removed stale {old.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
