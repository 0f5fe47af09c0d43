"""A big log's init lines wherever they stand, and one number per line.

Hang forensics reads a big log from its ends; the lines that say which rank
each process is (NCCL's `Init COMPLETE`, with its `Bootstrap : Using` and
`NET/IB : Using` lines) are usually in its head. When other output came
first (a job's own prints, a log reused by a restart), the head holds none
of them, and the NCCL reader's backward search must find them in the middle
for the processes the tail shows. And a line two readers quote (an NCCL
WARN that the c10d reader's catalogue also reads) must carry one number in
both, or the merge counts it twice, once without its process.

The files are generated here, with the readers' size constants made small
so that a few hundred KB take the paths a multi-GB log takes. The NCCL
lines follow corpus/public_t_nccl_h800_ib_completion_error12_nics (NCCL
2.18 format) with an `Init START` line as 2.18.3+ prints it.
"""

from __future__ import annotations

import gzip

import pytest

from forensics import analyze
from forensics.ingest import nccl, textio, torchlog
from forensics.plugins import Plugins

# (host, pid, rank, address)
PROCESSES = [("node-a", 30411, 0, "10.20.1.11"), ("node-a", 30412, 1, "10.20.1.11"),
             ("node-b", 28876, 2, "10.20.1.12"), ("node-b", 28877, 3, "10.20.1.12")]
COMM_ID = "0x9c2e5f01d77a4b13"
WARN = ("node-a:30412:31145 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
        "10.20.1.12<40137> with error 12, opcode 0, len 0, vendor err 129")


def init_lines() -> list[str]:
    lines = []
    for host, pid, rank, addr in PROCESSES:
        lines.append(f"{host}:{pid}:{pid} [{rank % 2}] NCCL INFO Bootstrap : Using bond0:{addr}<0>")
    lines.append("NCCL version 2.18.1+cuda12.1")
    for host, pid, rank, addr in PROCESSES:
        tid, dev = pid + 419, rank % 2
        lines.append(f"{host}:{pid}:{tid} [{dev}] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB bond0:{addr}<0>")
        comm = (f"comm 0x55d1a0c4{rank}000 rank {rank} nranks 4 cudaDev {dev} nvmlDev {dev} busId 18000 "
                f"commId {COMM_ID}")
        lines.append(f"{host}:{pid}:{tid} [{dev}] NCCL INFO ncclCommInitRank {comm} - Init START")
        lines.append(f"{host}:{pid}:{tid} [{dev}] NCCL INFO ncclCommInitRank {comm} - Init COMPLETE")
    return lines


def training(size: int, step: int = 0) -> list[str]:
    """About `size` bytes of a job's own output: nothing any reader claims."""
    lines, total = [], 0
    while total < size:
        line = f"[2026-03-01 10:{step // 60 % 60:02d}:{step % 60:02d}] [INFO] [train.py:188] step {step} loss 2.{step % 97:02d}"
        lines.append(line)
        total += len(line) + 1
        step += 1
    return lines


def write(path, before: int, between: int) -> bytes:
    """`before` bytes of training output, the init lines, `between` bytes more, the WARN and a last line."""
    lines = training(before) + init_lines() + training(between, 100000) + [WARN, "the job ends here"]
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(data)
    return data


@pytest.fixture
def small_sizes(monkeypatch):
    """The NCCL reader's tail mode on files of a few hundred KB: the same code paths as on gigabytes."""
    for name, value in (("TAIL_THRESHOLD", 128 << 10), ("HEAD_BYTES", 16 << 10), ("HEAD_FIRST", 16 << 10),
                        ("TAIL_BYTES", 16 << 10), ("TAIL_FIRST", 16 << 10), ("CHUNK", 32 << 10)):
        monkeypatch.setattr(nccl, name, value)


def ranks_of(facts) -> dict[tuple[str, int], int]:
    return {(host, pid): rank for host, pid, rank, _ in facts.pid_ranks}


def line_at(data: bytes, number: int) -> str:
    """Line `number` of `data`: from 1, or back from the end when negative."""
    lines = data.decode().split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines[number - 1] if number > 0 else lines[number]


def test_a_tail_mode_log_whose_head_is_other_output_finds_the_init_lines_of_its_tail_s_processes(
        tmp_path, small_sizes):
    path = tmp_path / "slurm-4242.out"
    data = write(path, before=nccl.HEAD_BYTES * 3, between=nccl.TAIL_THRESHOLD)
    assert len(data) > nccl.TAIL_THRESHOLD
    facts = nccl.parse(str(path), path.name)
    assert facts.diagnostics[0].message.startswith("tail mode: ")
    # the process that warned is rank 1 of the 4-rank communicator, as its init line says
    assert ranks_of(facts) == {("node-a", 30412): 1}
    (member,) = facts.comm_members
    assert member[:5] == (f"nccl:{COMM_ID}", 1, 4, "node-a", 30412)
    evidence = member[5]
    assert evidence.line < 0 and line_at(data, evidence.line) == evidence.text
    assert evidence.text.endswith(f"rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 18000 commId {COMM_ID} - Init START")
    (record,) = facts.records
    assert (record.host, record.pid, [e.text for e in record.errors]) == ("node-a", 30412, [WARN])
    # its Bootstrap line was read too (the first NCCL line of the process: where the search for it ends)
    (boot,) = [hit.evidence for hit in facts.messages if hit.id == "nccl-bootstrap-interface"]
    assert boot.text == "node-a:30412:30412 [1] NCCL INFO Bootstrap : Using bond0:10.20.1.11<0>"
    assert boot.line < 0 and line_at(data, boot.line) == boot.text
    # every line read whole gives the same answer, numbered from the start
    whole = nccl.parse(str(path), path.name, full=True)
    assert {("node-a", 30412): 1}.items() <= ranks_of(whole).items() and len(ranks_of(whole)) == 4


def test_the_search_for_init_lines_stops_at_a_process_s_first_line(tmp_path, small_sizes):
    """Older init lines of the same host:pid before its Bootstrap line (another run's) are not its own."""
    path = tmp_path / "job.log"
    old_run = [line.replace(f"rank 1 nranks 4", "rank 3 nranks 4").replace(COMM_ID, "0x1111111111111111")
               for line in init_lines() if ":30412:" in line and "Init" in line]
    lines = (training(nccl.HEAD_BYTES * 3) + old_run + training(1000, 5000) + init_lines()
             + training(nccl.TAIL_THRESHOLD, 100000) + [WARN])
    path.write_bytes(("\n".join(lines) + "\n").encode())
    facts = nccl.parse(str(path), path.name)
    assert ranks_of(facts) == {("node-a", 30412): 1}
    assert [m[0] for m in facts.comm_members] == [f"nccl:{COMM_ID}"]


def test_a_compressed_log_is_read_in_one_forward_pass_and_finds_them_too(tmp_path, small_sizes):
    plain = tmp_path / "plain.log"
    data = write(plain, before=nccl.HEAD_BYTES * 3, between=nccl.TAIL_THRESHOLD)
    packed = tmp_path / "node.log.gz"
    packed.write_bytes(gzip.compress(data))
    facts = nccl.parse(str(packed), packed.name)
    assert ranks_of(facts) == {(h, p): r for h, p, r, _ in PROCESSES}
    (record,) = [r for r in facts.records if r.errors]
    assert record.errors[0].line == data.decode().split("\n").index(WARN) + 1


def test_the_numbering_of_big_files_is_the_c10d_reader_s():
    """The NCCL reader numbers a big file as the c10d reader, which reads only its ends, does."""
    assert (torchlog.BIG_FILE, torchlog.BIG_HEAD) == (textio.BIG_TEXT, textio.BIG_TEXT_HEAD)


@pytest.fixture
def small_big_files(monkeypatch):
    """'Big' from 128 KiB with a 16 KiB head, for the NCCL and c10d readers alike."""
    for module, name, value in ((textio, "BIG_TEXT", 128 << 10), (textio, "BIG_TEXT_HEAD", 16 << 10),
                                (torchlog, "BIG_FILE", 128 << 10), (torchlog, "BIG_HEAD", 16 << 10),
                                (torchlog, "BIG_TAIL", 16 << 10)):
        monkeypatch.setattr(module, name, value)


WATCHDOG = ("[E ProcessGroupNCCL.cpp:475] [Rank 1] NCCL watchdog thread terminated with exception: NCCL error: "
            "remote process exited or there was a network error, NCCL version 2.18.1\n"
            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
            "prematurely.\n")


def test_a_line_two_readers_quote_is_one_line_with_its_process(tmp_path, small_big_files):
    """A log between the c10d reader's big-file size and the NCCL reader's tail mode: the NCCL reader
    reads it whole, the c10d reader its ends; both cite the WARN at one number, so the merge keeps
    one hit, the NCCL reader's, which knows its process and so its rank."""
    path = tmp_path / "node0_stderr.log"
    lines = training(textio.BIG_TEXT) + init_lines() + [WARN] + WATCHDOG.splitlines()
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(data)
    assert textio.BIG_TEXT < len(data) <= nccl.TAIL_THRESHOLD
    by_nccl = nccl.parse(str(path), path.name)
    by_c10d = torchlog.parse(str(path), path.name)

    def cited(facts):
        return {hit.evidence.line for hit in facts.messages if hit.id == "nccl-ib-completion-error"}

    assert cited(by_nccl) == cited(by_c10d) == {-3}
    assert line_at(data, -3) == WARN
    assert by_nccl.lines_read == len(lines)
    report = analyze(str(tmp_path), jobs=1, plugins=Plugins(autoload=False))
    hits = [hit for hit in report.incident.messages if hit.id == "nccl-ib-completion-error"]
    assert [(hit.evidence.line, hit.rank) for hit in hits] == [(-3, 1)]


def test_a_progress_bar_s_carriage_returns_do_not_shift_the_numbers(tmp_path, small_big_files):
    """`\\r` inside a line (a progress bar redrawn) is not a line break for
    `tail -n` or the NCCL reader: the c10d reader numbers the WARN before it
    at the same number from the end."""
    path = tmp_path / "node0_stderr.log"
    bar = "\r".join(f"step {i}/100 |{'#' * (i // 10)}" for i in range(0, 100, 7))
    lines = training(textio.BIG_TEXT) + init_lines() + [WARN, bar] + WATCHDOG.splitlines()
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(data)
    by_nccl, by_c10d = nccl.parse(str(path), path.name), torchlog.parse(str(path), path.name)

    def cited(facts):
        return {hit.evidence.line for hit in facts.messages if hit.id == "nccl-ib-completion-error"}

    assert cited(by_nccl) == cited(by_c10d) == {-4}


def test_the_line_across_the_head_and_a_tail_that_reaches_it_is_read(tmp_path, small_big_files):
    """A file just past the big size whose tail reaches back to the head: the
    line that straddles the head's end is read whole, not dropped by both."""
    path = tmp_path / "rank1.log"
    head = training(textio.BIG_TEXT_HEAD)
    filler = ("\n".join(head) + "\n").encode()
    straddle = len(filler) - (textio.BIG_TEXT_HEAD - 40)  # the watchdog line starts 40 bytes before the head ends
    data = filler[:-straddle] if straddle > 0 else filler
    data = data[:data.rfind(b"\n") + 1]
    pad = textio.BIG_TEXT_HEAD - 40 - len(data)
    data += (b"x" * max(pad - 1, 0)) + b"\n"
    watchdog = ("[rank1]:[E1018 15:43:10.121004519 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=60000) "
                "ran for 60043 milliseconds before timing out.\n").encode()
    assert len(data) < textio.BIG_TEXT_HEAD < len(data) + len(watchdog)
    rest = ("\n".join(training(torchlog.BIG_FILE)) + "\n").encode()
    body = data + watchdog + rest
    path.write_bytes(body)
    assert torchlog.BIG_FILE < len(body) <= textio.BIG_TEXT_HEAD + torchlog.BIG_TAIL * 16
    facts = torchlog.parse(str(path), path.name)
    assert any(op.seq == 9 for record in facts.records for op in ([record.last_op] if record.last_op else [])), \
        [r.last_op for r in facts.records]
