"""Static files under content-hashed names, cached for a year."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse

router = APIRouter(include_in_schema=False)

IMMUTABLE = "public, max-age=31536000, immutable"


@router.get("/static/{name:path}")
def static_file(name: str, request: Request) -> FileResponse:
    manifest = request.app.state.static
    path = manifest.by_hashed.get(name)
    cache = IMMUTABLE
    if path is None:
        # Unhashed names (only files the manifest knows: no path tricks) get a short cache.
        if name not in manifest.by_name:
            raise HTTPException(404, "No such static file")
        path = manifest.by_hashed[manifest.by_name[name]]
        cache = "public, max-age=60"
    return FileResponse(path, headers={"Cache-Control": cache})


@router.get("/favicon.ico")
def favicon(request: Request) -> FileResponse:
    """Browsers and tools ask for /favicon.ico whatever the page links; pages link the SVG."""
    manifest = request.app.state.static
    path = manifest.by_hashed[manifest.by_name["favicon.ico"]]
    return FileResponse(
        path, media_type="image/x-icon", headers={"Cache-Control": "public, max-age=86400"}
    )
