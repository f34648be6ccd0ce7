"""Runs a SuperNode's ClientApp tasks inside the node's warm worker: Flower's ``--isolation process``.

With ``flower-supernode --isolation process`` the SuperNode launches nothing itself: a process of the
user's takes each task from the SuperNode's Runtime API. Flower's own (``flower-superexec``) starts a fresh
``flwr-clientapp`` process per message, which costs ~1.5 s of imports and start-up on every message; this
one is the node's long-lived worker, which already holds torch, the data and the working model, and calls
fl-lightning's ClientApp (fl_lightning.deploy.client_app) in-process. It runs that ClientApp only: a run of
another Flower app gets an error reply. Built on Flower 1.42's Runtime API client (the calls its
``flwr-clientapp`` makes), so it follows that version.

    python -m fl_lightning.deploy.worker --runtime-api-address 127.0.0.1:9094 [--threads T]
"""
from __future__ import annotations

import time

from flwr.app import Message
from flwr.app.error import Error
from flwr.common.constant import ErrorCode, SubStatus
from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=E0611
from flwr.supercore.constant import TaskType
from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supernode.runtime.run_clientapp import pull_task_input, push_message, push_task_output

from fl_lightning.deploy import client_app

APP_PUBLISHER = "fl-lightning"
POLL_S = 0.1
GONE_AFTER_S = 10.0  # the SuperNode's Runtime API unreachable this long: the node stopped, so does the worker


def _client(address: str, *interceptors) -> RuntimeHttpClient:
    return RuntimeHttpClient.from_server_address(server_address=address, insecure=True, root_certificates=None,
                                                 interceptors=list(interceptors),
                                                 retry_invoker=make_simple_http_retry_invoker())


def run_task(address: str, token: str) -> None:
    """One message: pull it, answer it with the ClientApp, push the reply and the task's status."""
    client = _client(address, RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
                     RuntimeTokenHttpInterceptor(token))
    heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
    heartbeat.start()
    message = context = reply = None
    status, details = SubStatus.FAILED, "fl-lightning's ClientApp failed"
    try:
        message, context, run, _ = pull_task_input(client)
        if not run.fab_id.startswith(f"{APP_PUBLISHER}/"):
            raise ValueError(f"this node runs fl-lightning's ClientApp only, not {run.fab_id}")
        reply = client_app.app(message=message, context=context)
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
