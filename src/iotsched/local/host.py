"""A function host process: one warm Lambda container, run as a real OS process.

`invoke` mode answers invocation requests read from stdin (the tick emulator uses it for the
dispatcher). `poll` mode is an SQS event source mapping and its function in one process: it
receives up to BatchSize messages, invokes the handler with a Lambda-shaped event, deletes the
records the handler did not report as failed, and leaves the failed ones to reappear after the
visibility timeout (and reach the DLQ after maxReceiveCount). Killing the process is a real
worker death: its messages are simply never deleted. SIGUSR1 disables the event source mapping
(the batch in hand finishes, then nothing more is received) and SIGUSR2 enables it again.

Every host ends with its runtime: stdin's end (the runtime closed it, or died) is a stop.

Protocol lines (JSON) go to the original stdout; the handler's own output goes to stderr.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import click

ACCOUNT = "123456789012"


class FakeLambdaContext:
    """The attributes Powertools and handlers read from a Lambda context."""

    def __init__(self, function_name: str, timeout_s: int) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = 512
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:{function_name}"
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", "local")
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds until the function timeout."""
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def load_handler(code_dir: Path, handler: str) -> Callable[[Any, Any], Any]:
    """Import `module.function` from `code_dir`, as Lambda does from /var/task."""
    module_name, _, function = handler.rpartition(".")
    sys.path.insert(0, str(code_dir))
    spec = importlib.util.spec_from_file_location(module_name, code_dir / f"{module_name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {handler} from {code_dir}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    fn: Callable[[Any, Any], Any] = getattr(module, function)
    return fn


def _emit(out: TextIO, **fields: Any) -> None:
    out.write(json.dumps(fields, default=str) + "\n")
    out.flush()


def serve_invocations(
    fn: Callable[[Any, Any], Any], name: str, timeout_s: int, out: TextIO
) -> None:
    """Answer one JSON request per stdin line until stdin closes, or until SIGTERM or SIGINT
    (a terminal's Ctrl-C reaches the whole process group), which it reports as a stop."""

    def stop(signum: int, frame: Any) -> None:
        _emit(out, state="stopped")
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    _emit(out, state="ready")
    for line in sys.stdin:
        request = json.loads(line)
        try:
            result = fn(request["event"], FakeLambdaContext(name, timeout_s))
            _emit(out, id=request["id"], result=result)
        except Exception as exc:
            traceback.print_exc()
            _emit(out, id=request["id"], error=f"{type(exc).__name__}: {exc}")


#: How long a host asked to stop may take to finish its batch: the runtime kills it then
#: (`FunctionProcess.stop`), and a poller whose runtime is gone exits then.
STOP_GRACE_S = 15


def end_with_the_runtime(timeout_s: int) -> None:
    """A poller stops when its stdin ends, as on SIGTERM, and exits once the stop's grace
    (`STOP_GRACE_S`, or its timeout and 5 s if shorter) has passed.

    The runtime holds the other end of stdin and writes nothing to a poller, so the end comes
    when the runtime closes it to stop the host, or when the runtime's process ended, however
    it ended (a SIGKILL runs no cleanup). A poller left behind would go on polling its queue's
    URL, and a new runtime on the same port serves that URL: it would take its messages. An
    invoke-mode host reads its requests from stdin and ends with it already.
    """

    def watch() -> None:
        while os.read(0, 4096):
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(min(timeout_s + 5, STOP_GRACE_S))
        os._exit(1)

    threading.Thread(target=watch, name="runtime-watch", daemon=True).start()


#: The event source mapping's switch (SIGUSR1 disables it, SIGUSR2 enables it).
_source = {"paused": False}


def _switch_source(signum: int, frame: Any) -> None:
    _source["paused"] = signum == signal.SIGUSR1


#: How long one receive waits for a message (a long poll; SQS allows 20 s): an idle host asks
#: the emulator once per wait, and hears the switch when a wait ends (a stop ends it at once).
#: Longer waits saved a little idle CPU and cost the tests that pause workers more wall time.
POLL_WAIT_S = 1


class _StopReceiving(BaseException):
    """Raised by the stop signal's handler to end a long poll under way (a BaseException: no
    `except Exception` in the HTTP stack takes it for a failed request to retry)."""


def poll_queue(
    fn: Callable[[Any, Any], Any],
    name: str,
    timeout_s: int,
    queue_url: str,
    batch_size: int,
    out: TextIO,
) -> None:
    """Emulate an SQS event source mapping with ReportBatchItemFailures."""
    import boto3

    sqs = boto3.client("sqs", endpoint_url=os.environ.get("AWS_ENDPOINT_URL"))
    queue_name = queue_url.rstrip("/").rsplit("/", 1)[-1]
    source_arn = f"arn:aws:sqs:us-east-1:{ACCOUNT}:{queue_name}"
    stopping = receiving = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True
        if receiving:
            raise _StopReceiving  # out of the long poll now, not when it ends

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # The first line says which way the switch stands (a start with --paused reports paused).
    said_paused = _source["paused"]
    _emit(out, state="paused" if said_paused else "ready")
    while not stopping:
        if _source["paused"]:
            if not said_paused:
                _emit(out, state="paused")
                said_paused = True
            time.sleep(0.05)
            continue
        if said_paused:
            _emit(out, state="ready")
            said_paused = False
        try:
            receiving = True
            try:
                received = sqs.receive_message(
                    QueueUrl=queue_url,
                    MaxNumberOfMessages=min(batch_size, 10),
                    # The emulator answers as soon as a message is sent; an idle host asks
                    # once per wait (the switch is heard when a wait ends).
                    WaitTimeSeconds=POLL_WAIT_S,
                    AttributeNames=["All"],
                    MessageAttributeNames=["All"],
                ).get("Messages", [])
            finally:
                receiving = False
        except _StopReceiving:
            break  # a stop during the wait: the runtime and its emulator are ending
        except Exception:  # the emulator going away at shutdown
            if stopping:
                break
            traceback.print_exc()
            time.sleep(0.5)
            continue
        if not received:
            continue
        records = [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": m.get("MessageAttributes", {}),
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": source_arn,
                "awsRegion": "us-east-1",
            }
            for m in received
        ]
        _emit(out, state="busy", messages=[r["messageId"] for r in records], since=time.time())
        response: dict[str, Any] = {}
        try:
            response = fn({"Records": records}, FakeLambdaContext(name, timeout_s)) or {}
            failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
        except Exception:
            traceback.print_exc()
            failed = {r["messageId"] for r in records}  # the whole batch failed
            response = {"error": True}
        done = [
            {"Id": str(n), "ReceiptHandle": r["receiptHandle"]}
            for n, r in enumerate(records)
            if r["messageId"] not in failed
        ]
        if done:
            sqs.delete_message_batch(QueueUrl=queue_url, Entries=done)  # type: ignore[arg-type]
        # What the runtime tells its callers (e.g. `local tick` waits for the bucket dispatches
        # of its messages): each message's fate and the handler's answer.
        _emit(
            out,
            state="idle",
            succeeded=len(done),
            failed=len(failed),
            messages=[r["messageId"] for r in records],
            failed_ids=sorted(failed),
            result=response if isinstance(response, dict) else {},
        )
    _emit(out, state="stopped")


@click.command(
    context_settings={"help_option_names": ["-h", "--help"]},
    help="A function host process: one warm Lambda container (spawned by the local runtime).",
)
@click.option("--name", required=True, help="the function's name in its Lambda context")
@click.option(
    "--code-dir",
    type=click.Path(path_type=Path),
    required=True,
    help="the function's code directory (Lambda's /var/task)",
)
@click.option("--handler", default="app.lambda_handler", show_default=True, help="module.function")
@click.option("--timeout", type=int, required=True, help="the function timeout in seconds")
@click.option("--queue-url", default=None, help="poll this SQS queue (an event source mapping)")
@click.option("--batch-size", type=int, default=10, show_default=True, help="messages per batch")
@click.option("--paused", is_flag=True, help="start with the source disabled")
def host(
    name: str,
    code_dir: Path,
    handler: str,
    timeout: int,
    queue_url: str | None,
    batch_size: int,
    paused: bool,
) -> None:
    # Before the (slow) handler import: a switch sent meanwhile must not kill the process.
    _source["paused"] = paused
    signal.signal(signal.SIGUSR1, _switch_source)
    signal.signal(signal.SIGUSR2, _switch_source)
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # handler output (Powertools JSON logs) to stderr; protocol keeps stdout
    sys.stdout = sys.stderr
    fn = load_handler(code_dir, handler)
    if queue_url:
        end_with_the_runtime(timeout)
        poll_queue(fn, name, timeout, queue_url, batch_size, out)
    else:
        serve_invocations(fn, name, timeout, out)


def main(argv: list[str] | None = None) -> None:
    """Entry point: `python -m iotsched.local.host --code-dir D --handler H ...`."""
    host.main(args=argv, prog_name="python -m iotsched.local.host")


if __name__ == "__main__":
    main()
