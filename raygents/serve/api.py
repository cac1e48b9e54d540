"""The HTTP API (FastAPI): the routes under ``/v1``, the OpenAPI document, the health check
and the run inspector page, with every error as ``{"error": {"type", "message"}}``."""

from __future__ import annotations

import logging
from importlib import resources
from typing import Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from raygents.errors import RaygentsError
from raygents.serve import auth, history
from raygents.serve.body import (
    ApprovalsRequest,
    ForkRequest,
    ReplayRequest,
    ResolutionsRequest,
    RunRequest,
    ThreadRunRequest,
    parse_json,
    read_body,
    validated,
)
from raygents.serve.problems import Problem, problem_of
from raygents.serve.service import Service, checked_id
from raygents.serve.stream import last_event_id, sse

__all__ = ["build_api"]

log = logging.getLogger("raygents")

PAGE_HEADERS = {
    # The page runs its own script only: no inline script, nothing from elsewhere, no frames.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_PAGE_FILES = {"/": "index.html", "/page.js": "page.js", "/page.css": "page.css"}
_MEDIA = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css"}
_ERROR_SCHEMA = {
    "description": "an error",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {
                    "error": {
                        "type": "object",
                        "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
                        "required": ["type", "message"],
                    }
                },
            }
        }
    },
}


def _body_doc(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of a route that reads its body itself."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: _ERROR_SCHEMA for code in codes}


def build_api(service: Service) -> FastAPI:
    """The app a replica serves, answering through ``service``."""
    api = FastAPI(
        title="raygents",
        version="1",
        description="Runs and threads of raygents agents, their events, approvals and control.",
        docs_url=None,  # (the interactive docs load scripts from a CDN)
        redoc_url=None,
        openapi_url=None,  # served below, behind the token
    )
    token = service.settings.auth_token

    def authorize(request: Request) -> None:
        client = request.client.host if request.client is not None else None
        auth.check(token, request.headers.get("authorization"), client)

    _handlers(api)
    _page(api)
    _cors(api, service.settings.cors_origins)
    guarded = [Depends(authorize)]

    @api.get("/healthz", tags=["meta"])
    async def healthz() -> dict[str, str]:
        """Whether this replica answers."""
        return {"status": "ok"}

    @api.get("/openapi.json", include_in_schema=False, dependencies=guarded)
    async def openapi() -> dict[str, Any]:
        return api.openapi()

    _run_routes(api, service, guarded)
    _control_routes(api, service, guarded)
    _history_routes(api, service, guarded)
    _thread_routes(api, service, guarded)
    return api


def _cors(api: FastAPI, origins: tuple[str, ...]) -> None:
    """Answer the browsers of ``origins`` (CORS), when the app names any: their pages may
    send the token and read the answers; other origins get no CORS header."""
    if not origins:
        return
    api.add_middleware(
        CORSMiddleware,
        allow_origins=list(origins),
        allow_methods=["GET", "POST"],
        allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
        allow_credentials=False,  # (the token travels in a header, never in a cookie)
        max_age=600,
    )


async def _json_body(request: Request, model: type[Any]) -> Any:
    body = await read_body(dict(request.headers), request.stream())
    return validated(model, parse_json(body))


def _run_routes(api: FastAPI, service: Service, guarded: list[Any]) -> None:
    @api.post(
        "/v1/runs",
        status_code=201,
        dependencies=guarded,
        tags=["runs"],
        openapi_extra=_body_doc(RunRequest),
        responses=_errors(400, 401, 404, 409, 413, 422, 429),
    )
    async def start_run(request: Request) -> JSONResponse:
        """Start a run: 201 with its info, or with ``wait``, its outcome once it stops."""
        status, doc = await service.start(await _json_body(request, RunRequest))
        return JSONResponse(doc, status_code=status)

    @api.get("/v1/runs", dependencies=guarded, tags=["runs"], responses=_errors(401, 422))
    async def list_runs(
        status: str | None = None,
        agent: str | None = None,
        thread_id: str | None = None,
        limit: int = Query(100, ge=1, le=1000),
    ) -> dict[str, Any]:
        """The runs, newest first."""
        return await service.list(status, agent, thread_id, limit)

    @api.get("/v1/runs/{run_id}", dependencies=guarded, tags=["runs"], responses=_errors(404))
    async def get_run(run_id: str) -> dict[str, Any]:
        """A run's info, outcome, pending approvals and usage."""
        return await service.get(run_id)

    @api.get(
        "/v1/runs/{run_id}/messages", dependencies=guarded, tags=["runs"], responses=_errors(404)
    )
    async def get_messages(run_id: str) -> dict[str, Any]:
        """A run's conversation."""
        return await service.messages(run_id)

    @api.get(
        "/v1/runs/{run_id}/events",
        dependencies=guarded,
        tags=["runs"],
        responses={200: {"content": {"text/event-stream": {}}}, **_errors(404)},
    )
    async def get_events(request: Request, run_id: str) -> StreamingResponse:
        """The run's events as Server-Sent Events: its history, then live events, until it
        stops; ``Last-Event-ID`` resumes after that event."""
        await service.get(run_id)  # (404 before the stream starts)
        after = last_event_id(request.headers.get("last-event-id"))
        return StreamingResponse(
            sse(checked_id(run_id), after, service.settings.heartbeat_s),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )


def _control_routes(api: FastAPI, service: Service, guarded: list[Any]) -> None:
    @api.post(
        "/v1/runs/{run_id}/approvals",
        dependencies=guarded,
        tags=["control"],
        openapi_extra=_body_doc(ApprovalsRequest),
        responses=_errors(400, 404, 409, 422),
    )
    async def approve(request: Request, run_id: str) -> dict[str, Any]:
        """Decide each pending call of a run awaiting approval; the run goes on."""
        return await service.approve(run_id, await _json_body(request, ApprovalsRequest))

    @api.post(
        "/v1/runs/{run_id}/resolutions",
        dependencies=guarded,
        tags=["control"],
        openapi_extra=_body_doc(ResolutionsRequest),
        responses=_errors(400, 404, 409, 422),
    )
    async def resolve(request: Request, run_id: str) -> dict[str, Any]:
        """Resolve each call in doubt of a run in doubt; the run goes on."""
        return await service.resolve(run_id, await _json_body(request, ResolutionsRequest))

    @api.post(
        "/v1/runs/{run_id}/cancel",
        dependencies=guarded,
        tags=["control"],
        responses=_errors(404, 409),
    )
    async def cancel(run_id: str) -> dict[str, Any]:
        """Stop a running run now."""
        return await service.cancel(run_id)

    @api.post(
        "/v1/runs/{run_id}/suspend",
        dependencies=guarded,
        tags=["control"],
        responses=_errors(404, 409),
    )
    async def suspend(run_id: str) -> dict[str, Any]:
        """Suspend a running run at its next safe point."""
        return await service.suspend(run_id)

    @api.post(
        "/v1/runs/{run_id}/resume",
        dependencies=guarded,
        tags=["control"],
        responses=_errors(404, 409),
    )
    async def resume(run_id: str) -> dict[str, Any]:
        """Resume a suspended run."""
        return await service.resume(run_id)


def _history_routes(api: FastAPI, service: Service, guarded: list[Any]) -> None:
    @api.get(
        "/v1/runs/{run_id}/history",
        dependencies=guarded,
        tags=["history"],
        responses=_errors(404, 422),
    )
    async def get_history(run_id: str) -> dict[str, Any]:
        """A run's durable checkpoints, oldest first (``seq`` is what a fork starts from)."""
        return await history.history(service, run_id)

    @api.post(
        "/v1/runs/{run_id}/fork",
        status_code=201,
        dependencies=guarded,
        tags=["history"],
        openapi_extra=_body_doc(ForkRequest),
        responses=_errors(400, 404, 409, 413, 422, 429),
    )
    async def fork_run(request: Request, run_id: str) -> JSONResponse:
        """Start a new run from the run's checkpoint ``at`` (default: its newest), with
        ``input`` appended: 201 with its info, or with ``wait``, its outcome."""
        body = await _json_body(request, ForkRequest)
        status, doc = await history.fork(service, run_id, body)
        return JSONResponse(doc, status_code=status)

    @api.post(
        "/v1/runs/{run_id}/replay",
        dependencies=guarded,
        tags=["history"],
        openapi_extra=_body_doc(ReplayRequest),
        responses=_errors(400, 404, 422),
    )
    async def replay_run(request: Request, run_id: str) -> dict[str, Any]:
        """Check a served agent's graph against the run's recorded decisions, calling no
        model and no tool: ``ok``, and at the first divergence ``turn``, ``expected`` and
        ``got``."""
        return await history.replay(service, run_id, await _json_body(request, ReplayRequest))


def _thread_routes(api: FastAPI, service: Service, guarded: list[Any]) -> None:
    @api.post(
        "/v1/threads/{thread_id}/runs",
        status_code=201,
        dependencies=guarded,
        tags=["threads"],
        openapi_extra=_body_doc(ThreadRunRequest),
        responses=_errors(400, 404, 409, 413, 422, 429),
    )
    async def thread_run(request: Request, thread_id: str) -> JSONResponse:
        """A message to a thread: a run of the thread (see ``if_busy``)."""
        body = await read_body(dict(request.headers), request.stream())
        value = parse_json(body)
        if isinstance(value, dict):
            if value.get("thread_id", thread_id) != thread_id:
                raise Problem(
                    422, "ValidationError", "thread_id differs from the path's", field="thread_id"
                )
            value = {**value, "thread_id": thread_id}
        status, doc = await service.start(validated(ThreadRunRequest, value))
        return JSONResponse(doc, status_code=status)

    @api.get(
        "/v1/threads/{thread_id}", dependencies=guarded, tags=["threads"], responses=_errors(404)
    )
    async def get_thread(thread_id: str) -> dict[str, Any]:
        """A thread's messages and runs."""
        return await service.thread(thread_id)


def _page(api: FastAPI) -> None:
    folder = resources.files("raygents.serve") / "page"

    def route(name: str) -> Any:
        async def page() -> Response:
            media = _MEDIA[name[name.rindex(".") :]]
            return Response((folder / name).read_bytes(), media_type=media, headers=PAGE_HEADERS)

        return page

    for path, name in _PAGE_FILES.items():
        api.add_api_route(path, route(name), methods=["GET"], include_in_schema=False)


def _handlers(api: FastAPI) -> None:
    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(exc.document(), status_code=exc.status, headers=headers)

    async def on_invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"][1:]) or "request"
        problem = Problem(422, "ValidationError", f"{where}: {first['msg']}", field=where)
        return JSONResponse(problem.document(), status_code=422)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HTTPError")
        problem = Problem(exc.status_code, kind, str(exc.detail))
        return JSONResponse(problem.document(), status_code=exc.status_code, headers=exc.headers)

    async def on_crash(request: Request, exc: Exception) -> JSONResponse:
        log.error("request %s %s failed", request.method, request.url.path, exc_info=exc)
        problem = Problem(500, "InternalError", "the request failed; the app's log says why")
        return JSONResponse(problem.document(), status_code=500)

    async def on_raygents(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RaygentsError)
        return await on_problem(request, problem_of(exc))

    api.add_exception_handler(Problem, on_problem)
    api.add_exception_handler(RaygentsError, on_raygents)
    api.add_exception_handler(RequestValidationError, on_invalid)
    api.add_exception_handler(HTTPException, on_http)
    api.add_exception_handler(Exception, on_crash)
