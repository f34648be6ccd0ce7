"""Runs a SuperNode's ClientApp tasks inside the node's warm worker: Flower's ``--isolation process``.

With ``flower-supernode --isolation process`` the SuperNode launches nothing itself: a process of the
user's takes each task from the SuperNode's Runtime API. Flower's own (``flower-superexec``) starts a fresh
``flwr-clientapp`` process per message, which costs the imports (torch, Lightning) and start-up on every message;
this one is a long-lived worker that already holds them. It runs fl-lightning's ClientApp
(fl_lightning.deploy.client_app) — and **a user's own ClientApp** (e.g. examples/flower_app): its FAB is installed
and its ClientApp loaded once per FAB, as ``flwr-clientapp`` does for every message, then kept. The worker's
environment must have the app's dependencies (Flower's ``--disable-runtime-dependency-installation``: nothing is
installed at run time). Built on Flower 1.42's Runtime API client (the calls its ``flwr-clientapp`` makes), so it
follows that version.

    python -m fl_lightning.deploy.worker --runtime-api-address 127.0.0.1:9094 [--threads T]
"""
from __future__ import annotations

import time

from flwr.app import Message
from flwr.app.error import Error
from flwr.cli.install import install_from_fab
from flwr.clientapp import ClientApp
from flwr.clientapp.utils import get_load_client_app_fn
from flwr.common.constant import ErrorCode, SubStatus
from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=E0611
from flwr.supercore.constant import TaskType
from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supernode.runtime.run_clientapp import pull_task_input, push_message, push_task_output

from fl_lightning.deploy import client_app
from fl_lightning.deploy.project import FAB_ID

POLL_S = 0.1
LOADED: dict = {}  # FAB hash → a user's ClientApp, loaded once
GONE_AFTER_S = 10.0  # the SuperNode's Runtime API unreachable this long: the node stopped, so does the worker


def _client(address: str, *interceptors) -> RuntimeHttpClient:
    return RuntimeHttpClient.from_server_address(server_address=address, insecure=True, root_certificates=None,
                                                 interceptors=list(interceptors),
                                                 retry_invoker=make_simple_http_retry_invoker())


def users_app(run, fab) -> ClientApp:
    """The ClientApp of a user's FAB, installed and loaded on its first task, then kept (per FAB hash)."""
    if fab.hash_str not in LOADED:
        install_from_fab(fab.content, skip_prompt=True)
        load = get_load_client_app_fn(default_app_ref="", app_path=None, multi_app=True)
        LOADED[fab.hash_str] = load(run.fab_id, run.fab_version, fab.hash_str)
    return LOADED[fab.hash_str]


def run_task(address: str, token: str) -> None:
    """One message: pull it, answer it with the ClientApp, push the reply and the task's status."""
    client = _client(address, RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
                     RuntimeTokenHttpInterceptor(token))
    heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
    heartbeat.start()
    message = context = reply = None
    status, details = SubStatus.FAILED, "fl-lightning's ClientApp failed"
    try:
        message, context, run, fab = pull_task_input(client)
        app = client_app.app if run.fab_id == FAB_ID else users_app(run, fab)
        reply = app(message=message, context=context)
        status, details = SubStatus.COMPLETED, ""
    except Exception as err:  # the server hears it as the message's error
        if message is not None:
            reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=f"{type(err).__name__}: {err}"),
                            reply_to=message)
        details = str(err)
    finally:
        if reply is not None and context is not None:
            push_message(client, reply, context)
        push_task_output(client, context, status, details)
        heartbeat.stop()
        client.close()


def serve(address: str) -> None:
    """Takes and runs the SuperNode's ClientApp tasks until the SuperNode is gone."""
    superexec = _client(address, RuntimeVersionHttpInterceptor(component_name="SuperExec"))
    last_contact = time.monotonic()
    while time.monotonic() - last_contact < GONE_AFTER_S:
        try:
            acquired = superexec.AcquireTask(AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP]))
            last_contact = time.monotonic()
        except Exception:  # the SuperNode is not (yet, or any more) there
            time.sleep(0.5)
            continue
        if acquired.HasField("task") and acquired.token:
            run_task(address, acquired.token)
        else:
            time.sleep(POLL_S)
    superexec.close()
