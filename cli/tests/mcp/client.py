"""Drives `bpfvm mcp` with the official MCP Python SDK, as an agent would.

python client.py BPFVM CHECK...: each CHECK is one of
  tools   the tools are listed, each run tool with its output schema;
  bad     an unknown kernel, a tree path that is no tree and a malformed filter each come back
          as a tool error saying what to do, and the server still answers after them;
  run     a filtered run on 6.1 boots and returns a good verdict whose report holds the
          filter's tests, with progress (booting, tests N of M) and a readable kernel.log;
  two     two clients, each with its own server on this checkout, call at once (a
          change_verdict that refuses its base, which takes the checkout for seconds and boots
          nothing): one queues, told by progress which server holds the checkout, until the
          other's call has ended;
  cancel  the whole suite cancelled during its boot leaves no process of its own (qemu
          included) and never writes its report;
  kill    a client killed during a boot: the server stops the run and exits, leaving none.
`client.py BPFVM hold-boot` is the client the `kill` check kills.
Each check prints what it saw, with the time its calls took: a session transcript.
"""

import json
import os
import signal
import subprocess
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

BPFVM = sys.argv[1]
KERNEL = "6.1"
# Five tests of one module: a run that boots and judges, short under TCG.
FILTER = "bloom_filter::creation_with_allowed_flags"
# A call that takes the checkout for seconds and boots nothing: `vm-test --against` refuses
# the base after its build of xtask.
BAD_BASE = {"against": "no-such-ref-of-bpfvm"}
# A run boots within this (a cold guest build included) and ends within twice it.
BOOT_WITHIN_S = 900
# What is left has this long to go after a cancel (30 s SIGTERM grace, then SIGKILL).
GONE_WITHIN_S = 90
# The run cancelled and the run whose client is killed: the whole suite, whose tests take
# longer than a stop does, so a run that was not stopped would end and write its report.
WHOLE = {"kernel": KERNEL, "fresh": True}
TARGET = os.environ.get("CARGO_TARGET_DIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "target"
)
REPORT = os.path.join(TARGET, "vm-test", KERNEL, "report.json")


def say(*parts):
    print(*parts, flush=True)


def params():
    return StdioServerParameters(command=BPFVM, args=["mcp"], env=dict(os.environ))


def children(pid):
    """Every process descended from pid (by /proc's parent links), with its command name."""
    parent = {}
    comm = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # comm may hold spaces and parentheses: the fields after its last ')'.
        rest = stat[stat.rindex(")") + 2 :].split()
        if rest[0] == "Z":
            continue
        parent[int(d)] = int(rest[1])
        comm[int(d)] = stat[stat.index("(") + 1 : stat.rindex(")")]
    found = {}
    todo = [pid]
    while todo:
        p = todo.pop()
        for c, pp in parent.items():
            if pp == p and c not in found:
                found[c] = comm[c]
                todo.append(c)
    return found


def alive(pids):
    left = []
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] != "Z":
            left.append(p)
    return left


def ps(pids):
    """`ps` of the given pids (empty when none is left)."""
    if not pids:
        return "(none)"
    r = subprocess.run(
        ["ps", "-o", "pid,ppid,pgid,stat,etime,args", "-p", ",".join(map(str, pids))],
        capture_output=True,
        text=True,
    )
    return r.stdout.strip()


def qemu_of(tree):
    return [p for p, c in tree.items() if c.startswith("qemu-system")]


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def timed(what, call):
    start = time.monotonic()
    result = await call
    say(f"[{time.monotonic() - start:6.1f} s] {what}")
    return result


async def check_tools(session):
    tools = (await timed("tools/list", session.list_tools())).tools
    names = {t.name for t in tools}
    for want in ["kernels", "run", "selftests", "explain", "bisect_step", "change_verdict"]:
        assert want in names, f"no tool {want}: {sorted(names)}"
    by_name = {t.name: t for t in tools}
    for t in ["run", "selftests", "explain", "bisect_step", "kernels", "change_verdict"]:
        assert by_name[t].output_schema, f"{t} has no output schema"
    schema = json.dumps(by_name["run"].output_schema)
    for field in ["verdict", "exit_status", "report", "summary", "kernel_splats", "tests"]:
        assert field in schema, f"run's output schema lacks {field}"
    assert "change.json" in json.dumps(by_name["change_verdict"].output_schema)
    say("tools:", ", ".join(sorted(names)))
    k = await timed("kernels", session.call_tool("kernels", {}))
    assert not k.is_error, text_of(k)
    pins = [p["version"] for p in k.structured_content["pins"]]
    assert KERNEL in pins, pins
    say("pins:", ", ".join(pins))


async def check_bad(session):
    bad = [
        ("an unknown kernel", {"kernel": "9.99", "filter": "maps"}, ["9.99"]),
        ("a tree path that is no tree", {"kernel_tree": "/etc"}, ["not a kernel source tree"]),
        ("a malformed filter", {"filter": "bloom filter"}, ["filter", "give a part of a test's name"]),
    ]
    for what, args, says in bad:
        r = await timed(f"run {json.dumps(args)}", session.call_tool("run", args))
        assert r.is_error, f"{what}: not a tool error: {r}"
        text = text_of(r)
        for s in says:
            assert s in text, f"{what}: {s!r} not in {text!r}"
        say(f"  -> tool error: {text}")
    for what, args, says in [
        ("a base that is no revision", {"against": "main; id"}, ["holds ';'"]),
        ("a base that is no commit", {"against": "no-such-ref-of-bpfvm"}, ["not a commit of this repository"]),
    ]:
        r = await timed(f"change_verdict {json.dumps(args)}", session.call_tool("change_verdict", args))
        assert r.is_error, f"{what}: not a tool error: {r}"
        text = text_of(r)
        for s in says:
            assert s in text, f"{what}: {s!r} not in {text!r}"
        say(f"  -> tool error: {text}")
    # The server is still there.
    await session.list_tools()


async def check_run(session):
    seen = []

    async def progress(done, total, message):
        seen.append(message or "")
        say(f"    progress {done:g}: {message}")

    r = await timed(
        f"run kernel={KERNEL} filter={FILTER}",
        session.call_tool(
            "run",
            {"kernel": KERNEL, "filter": FILTER, "fresh": True},
            progress_callback=progress,
        ),
    )
    assert not r.is_error, text_of(r)
    out = r.structured_content
    report = out["report"]
    say(
        f"  -> verdict {out['verdict']} (exit {out['exit_status']}), "
        f"{report['summary']}, kernel {report['kernel']['release']}, "
        f"vm {report['vm']['ending']} in {report['vm']['wall_time_s']:.1f} s"
    )
    assert out["verdict"] == "good" and out["exit_status"] == 0, out.get("why")
    assert report["kernel"]["version"] == KERNEL
    assert report["summary"]["passed"] == 5 and report["summary"]["failed"] == 0, report["summary"]
    assert all(FILTER in t["name"] for t in report["tests"] if "::" in t["name"]), report["tests"]
    assert any(m.startswith("booting") for m in seen), seen
    assert any(m.startswith("tests 5 of 5") for m in seen), seen
    log = [u for u in out["resources"] if u.endswith("/kernel.log")]
    assert log, out["resources"]
    contents = (await timed(f"resources/read {log[0]}", session.read_resource(log[0]))).contents
    assert "Linux version" in contents[0].text
    # explain reads the same report back.
    name = report["tests"][0]["name"]
    x = await timed(f"explain {name}", session.call_tool("explain", {"test": name, "kernel": KERNEL}))
    assert not x.is_error, text_of(x)
    assert x.structured_content["outcome"] == "pass", x.structured_content


async def check_two():
    """Two clients at once: see the module's docstring."""
    calls = {}
    queued = {}

    async def client(name):
        async with stdio_client(params()) as (read, write):
            me = types.Implementation(name=name, version="1")
            async with ClientSession(read, write, client_info=me) as session:
                await session.initialize()

                async def progress(done, total, message):
                    if (message or "").startswith("queued behind"):
                        queued[name] = message
                        say(f"    {name} progress: {message}")

                start = time.monotonic()
                r = await session.call_tool("change_verdict", BAD_BASE, progress_callback=progress)
                calls[name] = (start, time.monotonic())
                say(f"[{calls[name][1] - start:6.1f} s] {name}: change_verdict {json.dumps(BAD_BASE)}")
                assert r.is_error and "not a commit of this repository" in text_of(r), text_of(r)

    async with anyio.create_task_group() as tg:
        tg.start_soon(client, "client A")
        tg.start_soon(client, "client B")
    assert len(queued) == 1, f"not exactly one client queued: {queued}"
    waiter = next(iter(queued))
    first = "client A" if waiter == "client B" else "client B"
    assert queued[waiter].startswith(f"queued behind {first} (bpfvm mcp pid "), queued
    # The first's call ended before the waiter's.
    assert calls[first][1] <= calls[waiter][1], calls
    took = {n: calls[n][1] - calls[n][0] for n in calls}
    say(f"  {waiter} queued behind {first}: its call took {took[waiter]:.1f} s, {first}'s {took[first]:.1f} s")


def written():
    """When the suite's report on KERNEL was last written (None: never)."""
    try:
        return os.stat(REPORT).st_mtime_ns
    except FileNotFoundError:
        return None


async def boot_then(session, server_pid, act):
    """Starts the whole suite; once it boots and qemu runs under the server, calls act() and
    returns every process the server had started then."""
    booted = anyio.Event()

    async def progress(done, total, message):
        say(f"    progress {done:g}: {message}")
        if (message or "").startswith("booting"):
            booted.set()

    tree = {}
    async with anyio.create_task_group() as tg:

        async def call():
            r = await session.call_tool("run", WHOLE, progress_callback=progress)
            raise AssertionError(f"the run ended before it was stopped: {text_of(r)}")

        tg.start_soon(call)
        with anyio.fail_after(BOOT_WITHIN_S):
            await booted.wait()
            while not qemu_of(children(server_pid)):
                await anyio.sleep(0.2)
        tree = children(server_pid)
        say(f"  booting; the server's processes:\n{ps(list(tree))}")
        await act(tg)
    return tree


def server_pid_of(session_pid_hint=None):
    """The `bpfvm mcp` child of this process."""
    mine = children(os.getpid())
    pids = [p for p, c in mine.items() if c == "bpfvm"]
    assert len(pids) == 1, mine
    return pids[0]


async def wait_gone(pids, what, before):
    """Every process of `pids` gone, and the run stopped: its report not written since."""
    start = time.monotonic()
    while alive(pids) and time.monotonic() - start < GONE_WITHIN_S:
        await anyio.sleep(0.5)
    left = alive(pids)
    say(f"  {what}: after {time.monotonic() - start:.1f} s, ps of what the run had started:\n{ps(left)}")
    assert not left, f"left running after {what}: {ps(left)}"
    assert written() == before, f"the run went on to write {REPORT} after {what}"


async def check_cancel(session):
    server = server_pid_of()
    before = written()
    start = time.monotonic()

    async def cancel(tg):
        say(f"  cancelling the run ({time.monotonic() - start:.1f} s after the call)")
        tg.cancel_scope.cancel()

    tree = await boot_then(session, server, cancel)
    assert qemu_of(tree), tree
    await wait_gone(list(tree), "the cancelled run", before)
    # The server goes on serving.
    await timed("tools/list after the cancel", session.list_tools())


async def hold_boot():
    """The client `kill` kills: starts a run and prints the server's pid and its processes
    once it boots, then waits to be killed."""
    async with stdio_client(params()) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            server = server_pid_of()

            async def report(tg):
                tree = children(server)
                print(json.dumps({"server": server, "tree": list(tree)}), flush=True)
                await anyio.sleep_forever()

            await boot_then(session, server, report)


async def check_kill():
    before = written()
    client = subprocess.Popen(
        [sys.executable, __file__, BPFVM, "hold-boot"],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = ""
    for line in client.stdout:
        if line.startswith("{"):
            break
        print(line, end="", flush=True)
    seen = json.loads(line)
    say(f"  killing the client (pid {client.pid}) with SIGKILL")
    client.kill()
    client.wait()
    await wait_gone([seen["server"]] + seen["tree"], "the killed client", before)


async def main(checks):
    if checks == ["hold-boot"]:
        await hold_boot()
        return
    async with stdio_client(params()) as (read, write):
        async with ClientSession(read, write) as session:
            init = await timed("initialize", session.initialize())
            say(f"server {init.server_info.name} {init.server_info.version}, protocol {init.protocol_version}")
            for check in (c for c in checks if c not in ("two", "kill")):
                say(f"== {check}")
                if check == "tools":
                    await check_tools(session)
                elif check == "bad":
                    await check_bad(session)
                elif check == "run":
                    await check_run(session)
                elif check == "cancel":
                    await check_cancel(session)
    if "two" in checks:
        say("== two")
        await check_two()
    if "kill" in checks:
        say("== kill")
        await check_kill()
    say(f"{len(checks)} passed, 0 failed")


if __name__ == "__main__":
    anyio.run(main, sys.argv[2:])
