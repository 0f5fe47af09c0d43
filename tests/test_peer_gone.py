"""A peer that vanished, as its survivors report it, when nothing dates the
lines: the tracebacks of a real monitored-barrier failure (the capture of
corpus/real_monitored_barrier_names_rank, less its dated c10d lines).

Rank 2's error wraps the Gloo error of its exchange with rank 0 ("received
errors while waiting for send/recv from rank 0", then "Original exception:"
and "Connection closed by peer ADDR"), so ADDR is rank 0's; and rank 0
logged a cause of its own (rank 1 never reached the barrier), so rank 0's
going away is a knock-on and rank 1 is the culprit."""

import os

from forensics import analyze

REAL = os.path.join(os.path.dirname(__file__), "..", "corpus", "real_monitored_barrier_names_rank")


def _undated(name: str) -> str:
    """A rank's stderr without the c10d lines that carry a time ([E1201 17:38:54...])."""
    with open(os.path.join(REAL, name), encoding="utf-8") as handle:
        return "".join(line for line in handle if not line.split("]:", 1)[-1].startswith("[E"))


def _write(tmp_path, files: dict) -> str:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return str(tmp_path)


def test_the_vanished_peer_that_logged_its_own_cause_is_a_knock_on(tmp_path):
    folder = _write(tmp_path, {"rank0.stderr.log": _undated("rank0.stderr.log"),
                               "rank2.stderr.log": _undated("rank2.stderr.log")})
    report = analyze(folder, hung=True, jobs=1)
    assert report.verdict == "missing_rank" and report.culprit_ranks == [1]
    gone = [f for f in report.findings if f.rule == "stated-peer-gone"]
    assert len(gone) == 1 and gone[0].severity == "warning"
    assert gone[0].ranks == (0,)  # the address of the wrapped Gloo error is rank 0's


def test_the_wrapped_error_alone_ties_the_address_to_the_named_rank(tmp_path):
    folder = _write(tmp_path, {"rank2.stderr.log": _undated("rank2.stderr.log")})
    report = analyze(folder, hung=True, jobs=1)
    gone = [f for f in report.findings if f.rule == "stated-peer-gone"]
    assert report.verdict == "dead_rank" and report.culprit_ranks == [0]
    assert [c.rank for c in gone[0].culprits] == [0] and gone[0].culprits[0].addr == "[127.0.0.1]:38808"


def test_an_address_wrapped_for_two_different_ranks_is_tied_to_neither():
    # Gloo's monitored barrier always names rank 0; a wrapper naming another
    # rank (a later PyTorch, another catalogue entry) must not tie the same
    # address to two ranks.
    from types import SimpleNamespace

    from forensics.model import Evidence, MessageHit
    from forensics.rules.stated_cause import AddressBook

    def pair(rank, peer, addr, path):
        wrapper = MessageHit("c10d-gloo-monitored-barrier-peer-error", (("peer_rank", peer), ("rank", rank)),
                             Evidence(path, 17, "RuntimeError: Rank ..."), rank=rank)
        closed = MessageHit("gloo-connection-closed-by-peer", (("peer_addr", addr),),
                            Evidence(path, 19, "Connection closed by peer " + addr), rank=rank)
        return [(wrapper, None), (closed, None)]

    incident = SimpleNamespace(ranks={})
    agreeing = AddressBook(incident, pair(2, 0, "[10.0.0.5]:4000", "a.log") + pair(3, 0, "[10.0.0.5]:4000", "b.log"))
    assert agreeing.culprit(addr="[10.0.0.5]:4000").rank == 0
    split = AddressBook(incident, pair(2, 0, "[10.0.0.5]:4000", "a.log") + pair(3, 1, "[10.0.0.5]:4000", "b.log"))
    assert split.culprit(addr="[10.0.0.5]:4000").rank is None
    far = pair(2, 0, "[10.0.0.5]:4000", "a.log")
    far[1] = (MessageHit(far[1][0].id, far[1][0].facts, Evidence("a.log", 40, "..."), rank=2), None)
    assert AddressBook(incident, far).culprit(addr="[10.0.0.5]:4000").rank is None  # not the wrapped error
