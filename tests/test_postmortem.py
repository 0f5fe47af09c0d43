"""The job that already crashed: how each rank ended (cause or knock-on),
one clock for every artifact, and verdicts that do not depend on file
order, file names or a host's clock being a few seconds off."""

import json
import random
import re
import shutil
from datetime import datetime, timedelta

import pytest

from forensics import clock, model as m, postmortem
from forensics.cli import main

from conftest import CORPUS


def _state(ending, log=()):
    return m.RankState(rank=3, pid=4242, alive=False, activity=m.EXITED, ending=ending,
                       log_events=tuple(m.Evidence("r.log", n, text) for n, text in log))


def _hit(entry_id, line, **facts):
    from forensics.messages import catalogue

    return (m.MessageHit(entry_id, tuple(sorted(facts.items())), m.Evidence("r.log", line, "...")),
            catalogue().get(entry_id))


@pytest.mark.parametrize("ending, hits, log, role", [
    (m.Ending(-9), [], (), "cause"),                                   # SIGKILL: the OOM killer or an operator
    (m.Ending(137), [], (), "cause"),                                  # the same, as a shell reports it
    (m.Ending(-11), [], (), "cause"),                                  # SIGSEGV
    (m.Ending(-15, "SIGTERM"), [], (), "knock_on"),                    # the launcher stopping the survivors
    (m.Ending(-6), [("c10d-nccl-watchdog-timeout", 2)], (), "knock_on"),  # an abort after its own timeout
    (m.Ending(1), [("gloo-connection-closed-by-peer", 4)], (), "knock_on"),
    (m.Ending(1), [], [(7, "ValueError: cannot reshape array of size 1047552 into shape (512,2048)")], "cause"),
    (m.Ending(1), [], [(7, "torch.distributed.DistBackendError: NCCL communicator was aborted")], "knock_on"),
    (m.Ending(-6), [], (), "cause"),                                   # an abort nothing before explains
])
def test_how_a_rank_ended(ending, hits, log, role):
    judged, reason = postmortem.judge(_state(ending, log), [_hit(i, n) for i, n in hits])
    assert judged == role, reason


def test_an_own_error_after_a_communication_failure_is_that_failure_s_echo():
    log = [(9, "RuntimeError: shapes do not match")]
    judged, _ = postmortem.judge(_state(m.Ending(1), log), [_hit("gloo-connection-closed-by-peer", 4)])
    assert judged == "knock_on"


@pytest.mark.parametrize("text, seconds, which", [
    ("[2025-04-21 04:13:43,123] torch.distributed.elastic", "2025-04-21 04:13:43.123", "wall"),
    ("time      : 2025-04-21_04:13:43", "2025-04-21 04:13:43", "wall"),
    ("[Tue Apr 21 04:13:43 2025] Out of memory: Killed process 1", "2025-04-21 04:13:43", "wall"),
    ("[rank3]:[E709 17:05:38.162814866 ProcessGroupNCCL.cpp:2271] x", "2000-07-09 17:05:38.162814", "wall-noyear"),
    ("E1129 02:41:17.665000 1234 torch/distributed/elastic/x.py:1] y", "2000-11-29 02:41:17.665", "wall-noyear"),
    ("Apr 21 04:13:43 node7 kernel: x", "2000-04-21 04:13:43", "wall-noyear"),
])
def test_times_in_every_prefix(text, seconds, which):
    value, name = clock.stamp(text)
    expected = datetime.fromisoformat(seconds).replace(tzinfo=None)
    assert name == which
    assert abs(value - (expected - datetime(1970, 1, 1)).total_seconds()) < 1e-3


def test_dmesg_counts_from_boot_and_a_year_is_filled_in():
    assert clock.stamp("[2381945.112003] Memory cgroup out of memory: Killed process 48215") == (
        2381945.112003, "boot")
    assert clock.stamp("no time 12:00 here") is None
    feb29, _ = clock.stamp("[E229 10:00:00.000000 x.cpp:1] y")
    assert datetime.utcfromtimestamp(clock.with_year(feb29, 2025)) == datetime(2025, 2, 28, 10, 0)


def _event(host, time, role="cause", rank=None):
    return m.Event(time, "wall", "crash", role, m.Evidence(f"{host}.log", 1, "x"), host, rank)


def test_across_hosts_only_a_gap_larger_than_the_skew_orders_events():
    a, b = _event("a", 100.0), _event("b", 103.0)
    assert not postmortem.before(a, b, 5.0) and postmortem.before(a, b, 1.0)
    assert postmortem.before(_event("a", 100.0), _event("a", 100.5), 5.0)  # one host, one clock
    incident = m.Incident(ranks={}, groups={}, events=(a, b), skew_s=5.0)
    assert postmortem.first_causes(incident) == [a, b]  # cannot be told apart
    assert postmortem.first_causes(m.Incident(ranks={}, groups={}, events=(a, b), skew_s=1.0)) == [a]


def test_a_shared_moment_bounds_the_skew_and_corrects_a_host_s_clock():
    init = "comm 0x55 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0xabc123 - Init COMPLETE"
    hits = []
    for host, offset in (("a", 0.0), ("b", 4.0)):
        stamp = (datetime(2025, 4, 21, 10, 0, 0) + timedelta(seconds=offset)).isoformat(sep=" ")
        hits.append(_init_hit(host, f"[{stamp}] {host}:1:1 [0] NCCL INFO {init}"))
    from forensics.messages import catalogue

    entry = catalogue().get(hits[0].id)
    offsets_skew = postmortem.timeline(m.Incident(ranks={}, groups={}), [(h, entry) for h in hits])
    assert offsets_skew[1] == postmortem.MIN_SKEW_S  # both hosts logged one moment: the skew is bounded


def _init_hit(host, text):
    from forensics.messages import catalogue

    (entry, facts), = [(e, f) for e, f in catalogue().match(text) if "comm_id" in f]
    return m.MessageHit(entry.id, tuple(sorted(facts.items())), m.Evidence(f"{host}.log", 1, text), host=host)


# ---------------------------------------------------------------- properties over real incidents

POST_MORTEM = ["real_sigkill_one_rank_gloo_fast_failure", "real_watchdog_timeout_missing_rank",
               "real_monitored_barrier_names_rank", "real_exception_one_rank_peers_closed",
               "pm_oom_kill_launcher_blames_knockon", "pm_gloo_sigkill_peer_closed_two_hosts"]


def _verdict(folder, *args):
    out = folder.parent / f"{folder.name}.json"
    code = main(["analyze", str(folder), "-f", "json", "-o", str(out), "--no-plugins", "-q", "-j", "1", *args])
    report = json.loads(out.read_text())
    return code, report["verdict"], report["culprit_ranks"]


def _copy(incident, tmp_path, rename):
    source = CORPUS / incident
    if not source.is_dir():
        pytest.skip(f"{incident} is not in the corpus")
    target = tmp_path / incident
    target.mkdir()
    for path in sorted(source.rglob("*")):
        if path.is_file() and path.name not in ("expected.yaml", "SOURCE.md", "make.py"):
            relative = path.relative_to(source)
            destination = target / rename(relative)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, destination)
    return source, target


@pytest.mark.parametrize("incident", POST_MORTEM)
def test_the_order_of_files_does_not_change_the_verdict(incident, tmp_path):
    shuffle = random.Random(incident)
    letters = {}

    def rename(relative):
        # a random first letter changes the order every reader sees the files in; the name keeps its rank
        letters.setdefault(relative.parent, {})
        prefix = "".join(shuffle.choice("abcdefghij") for _ in range(3))
        return relative.parent / f"{prefix}.{relative.name}"

    source, target = _copy(incident, tmp_path, rename)
    original = _verdict(_copy_plain(source, tmp_path))
    assert _verdict(target) == original


def _copy_plain(source, tmp_path):
    target = tmp_path / f"{source.name}.plain"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("expected.yaml", "SOURCE.md", "make.py"))
    return target


@pytest.mark.parametrize("incident", ["pm_oom_kill_launcher_blames_knockon", "pm_gloo_sigkill_peer_closed_two_hosts"])
def test_shifting_one_host_s_clock_by_seconds_does_not_change_the_verdict(incident, tmp_path):
    source = CORPUS / incident
    if not source.is_dir():
        pytest.skip(f"{incident} is not in the corpus")
    plain = _copy_plain(source, tmp_path)
    original = _verdict(plain)
    shifted = tmp_path / f"{incident}.shifted"
    shutil.copytree(plain, shifted)
    files = sorted(p for p in shifted.rglob("*") if p.is_file())
    host_files = [p for p in files if re.search(r"node-?b|cpu-b|host-?b|gpu-b", p.name)] or files[len(files) // 2:]
    for path in host_files:
        path.write_text(_shift(path.read_text(errors="replace"), 3), errors="replace")
    assert _verdict(shifted) == original


_ISO = re.compile(r"(\d{4}-\d\d-\d\d[T _]\d\d:\d\d:\d\d)")
_C10 = re.compile(r"(?<=[FEWIV])(\d{3,4} \d\d:\d\d:\d\d)")


def _shift(text, seconds):
    def iso(found):
        stamp = found.group(1)
        sep = stamp[10]
        moved = datetime.fromisoformat(stamp.replace("_", " ").replace("T", " ")) + timedelta(seconds=seconds)
        return moved.strftime(f"%Y-%m-%d{sep}%H:%M:%S")

    def c10(found):
        digits, hms = found.group(1).split(" ")
        moved = datetime(2000, int(digits[:-2]), int(digits[-2:]), *map(int, hms.split(":"))) + timedelta(seconds=seconds)
        return f"{moved.month}{moved.day:02d} {moved:%H:%M:%S}"

    return _C10.sub(c10, _ISO.sub(iso, text))


@pytest.mark.parametrize("incident", ["pm_slurm_merged_illegal_memory_access", "synthetic_fragment_detail_two_logs",
                                      "pm_gloo_sigkill_peer_closed_two_hosts", "synthetic_attr_srun_label"])
def test_neutral_file_names_do_not_change_the_verdict_when_the_lines_name_their_ranks(incident, tmp_path):
    """Where a pid map or the lines themselves say which rank printed what,
    the files' names can be anything."""
    counter = iter(range(1000))

    def rename(relative):
        if relative.name == "pid_map.json":
            return relative
        return relative.parent / f"artifact_{next(counter):03d}{''.join(relative.suffixes[-1:])}"

    source, target = _copy(incident, tmp_path, rename)
    assert _verdict(target) == _verdict(_copy_plain(source, tmp_path))


def test_a_rank_whose_own_watchdog_says_it_is_in_a_call_is_there_though_its_host_ran_ahead(tmp_path):
    """NCCL calls return at once: py-spy shows ranks 0, 1, 3 in their training
    code, their watchdogs say all_reduce #23923 never completed; rank 2's
    counters never reached it. Rank 2 is the missing one."""
    code, verdict, culprits = _verdict(_copy_plain(CORPUS / "pm_missing_rank_enqueued_behind", tmp_path))
    assert (verdict, culprits) == ("missing_rank", [2])


def test_dmesg_is_put_on_the_wall_clock_by_the_death_another_artifact_dates(tmp_path):
    """node-b's dmesg counts from boot; its OOM kill of pid 48215 and the
    launcher's dated exit of that pid are one moment, which anchors the file."""
    folder = _copy_plain(CORPUS / "pm_oom_kill_launcher_blames_knockon", tmp_path)
    out = tmp_path / "report.json"
    main(["analyze", str(folder), "-f", "json", "-o", str(out), "--no-plugins", "-q", "-j", "1"])
    report = json.loads(out.read_text())
    kernel = [e for e in report["events"] if e["evidence"]["path"].endswith("dmesg.txt")]
    assert kernel and all(e["clock"] == "wall" for e in kernel)
    first = [report["events"][i] for i in report["timeline"]["first_failure"]]
    assert any(e["evidence"]["path"].endswith("dmesg.txt") and e["kind"] == "oom" for e in first)
    assert all(e["role"] != "knock_on" for e in first)
