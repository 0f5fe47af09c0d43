"""Build incidents in memory, the way the snapshot reader would."""

from forensics import analyze_incident
from forensics.ingest import merge
from forensics.ingest.snapshot import states_from_mapping
from forensics.model import StuckSignal
from forensics.plugins import Plugins
from dataclasses import replace


def incident_of(states, groups=None, hung=False):
    facts = states_from_mapping(states, "snap.json")
    if groups:
        from forensics.model import ProcessGroup
        facts.groups.extend(ProcessGroup(str(g), "", tuple(r)) for g, r in groups.items())
    incident = merge([facts])
    if hung:
        incident = replace(incident, stuck=incident.stuck + (StuckSignal("cli_hung", "test"),))
    return incident


def report_of(states, groups=None, hung=False, plugins=None):
    return analyze_incident(incident_of(states, groups, hung), plugins or Plugins(autoload=False))
