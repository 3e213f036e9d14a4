"""Slurm keys: the prolog and health check the integration installs, the
slurm.conf fragment, and the drain cap (model/slurm.py, model/drain_cap.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from ccrhost.settings.paths import AbsPath, SearchPath, file_name_problem, written_file

# slurm.conf's HealthCheckNodeState: a comma list of these (slurm.conf(5)).
HEALTHCHECK_STATES = ("ALLOC", "ANY", "CYCLE", "IDLE", "MIXED", "NONDRAINED_IDLE")


class SlurmSettings(BaseModel, defer_build=True):
    slurm_ccrhost: AbsPath = Field(
        "/usr/local/bin/ccrhost", description="The ccrhost command on the node, as the Slurm prolog and health check run it."
    )
    slurm_path: SearchPath = Field(
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        description="PATH for the prolog and health check (slurmd runs them with none): nvidia-smi, scontrol.",
    )
    slurm_conf: AbsPath | None = Field(
        None, description="SLURM_CONF the scripts export for scontrol; default: Slurm's own (/etc/slurm/slurm.conf)."
    )
    slurm_fragment: AbsPath = Field(
        "/etc/slurm/ccrhost.conf", description="The slurm.conf fragment ccrhost writes; slurm.conf must `Include` it."
    )
    slurm_prolog: bool = Field(
        True, description="Set Prolog= in the fragment; off when the site's own prolog calls /etc/ccrhost/slurm-prolog.sh."
    )
    slurm_healthcheck: Literal["ccrhost", "nhc", "none"] = Field(
        "ccrhost", description="Who runs the periodic check: ccrhost (the fragment sets HealthCheckProgram), nhc "
        "(the site's LBNL NHC keeps HealthCheckProgram; ccrhost writes an NHC check file, nhc.conf names it) or "
        "none (the fragment leaves the HealthCheck* lines out).",
    )
    slurm_healthcheck_interval: int = Field(
        300, ge=0, le=86400, description="HealthCheckInterval, seconds (0: no periodic health check)."
    )
    slurm_healthcheck_node_state: str = Field(
        "ANY", description=f"HealthCheckNodeState: a comma list of {', '.join(HEALTHCHECK_STATES)}."
    )
    slurm_mode: Literal["enforce", "observe"] = Field(
        "enforce", description="observe: the prolog and health check judge, log (syslog, slurm_log) and export "
        "(slurm_textfile) the verdict and what they would do, and drain, hold and fail nothing; enforce: they act. "
        "Either way a fault of ccrhost's own (check_config, check_error) lets the job run.",
    )
    slurm_log: AbsPath | None = Field(
        None, description="A file the prolog and health check append a line to when the node is not OK or they "
        "acted (or, observing, would have); none: syslog only.",
    )
    slurm_textfile: AbsPath | None = Field(
        None, description="A node_exporter textfile the prolog and health check rewrite on each run: the verdict, "
        "the would-be drain or hold (observe mode) and a fault of ccrhost's own; none: not written.",
    )
    # --- the drain cap (issue 35): no drain storm; see ccrhost/model/drain_cap.py
    slurm_drain_cap_nodes: int | None = Field(
        None, ge=1, description="At most this many nodes drained by ccrhost for one reason code within "
        "slurm_drain_cap_window; past it the prolog keeps jobs off a failing node without draining it "
        "(none: only the share caps).",
    )
    slurm_drain_cap_share: float | None = Field(
        0.1, gt=0, le=1, description="At most this share of the node's partitions drained by ccrhost for one "
        "FAIL code within slurm_drain_cap_window (always at least one node; none: only the count caps).",
    )
    slurm_drain_cap_unknown_share: float | None = Field(
        0.05, gt=0, le=1, description="The same for an UNKNOWN code (a node that cannot be read), capped first: "
        "at most slurm_drain_cap_share.",
    )
    slurm_drain_cap_window: int = Field(
        3600, ge=60, le=30 * 86400, description="Seconds a ccrhost drain counts against the cap after it was set.",
    )
    slurm_drain_cap_textfile: AbsPath | None = Field(
        None, description="A node_exporter textfile the check writes when the drain cap holds on this node "
        "(ccrhost_drain_cap_held 1, per code) and clears when it no longer does; none: log and Slurm only. "
        "A file of ccrhost's own, and no other path setting's file (a state file it replaced lost its "
        "results).",
    )

    @field_validator("slurm_healthcheck_node_state")
    @classmethod
    def _node_states(cls, value):
        words = value.split(",")
        if not value or any(w not in HEALTHCHECK_STATES for w in words) or len(set(words)) != len(words):
            raise ValueError(f"a comma list of {', '.join(HEALTHCHECK_STATES)}")
        return value

    @field_validator("slurm_fragment")
    @classmethod
    def _fragment_is_ours(cls, value):
        return written_file(value, "/etc/slurm/ccrhost.conf")

    @field_validator("slurm_drain_cap_textfile")
    @classmethod
    def _cap_textfile_is_ours(cls, value):
        return None if value is None else written_file(value, "/var/lib/node_exporter/textfile/ccrhost-drain-cap.prom")

    @field_validator("slurm_textfile")
    @classmethod
    def _textfile_is_ours(cls, value):
        return None if value is None else written_file(value, "/var/lib/node_exporter/textfile/ccrhost-slurm.prom")

    @field_validator("slurm_log")
    @classmethod
    def _log_is_ours(cls, value):
        return None if value is None else written_file(value, "/var/log/ccrhost/slurm.log")

    @field_validator("slurm_ccrhost", "slurm_conf")
    @classmethod
    def _names_a_file(cls, value):
        problem = file_name_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value

    def _drain_cap_rules(self) -> None:
        """The UNKNOWN share against the FAIL share (HostSettings.model_post_init)."""
        if (self.slurm_drain_cap_unknown_share and self.slurm_drain_cap_share
                and self.slurm_drain_cap_unknown_share > self.slurm_drain_cap_share):
            raise ValueError(f"[slurm_drain_cap_unknown_share] {self.slurm_drain_cap_unknown_share} is above "
                             f"slurm_drain_cap_share {self.slurm_drain_cap_share}: UNKNOWN drains are capped first")

    def drain_cap(self):
        """The drain cap (``slurm_drain_cap_*``)."""
        from ccrhost.model.drain_cap import DrainCap

        return DrainCap(self.slurm_drain_cap_nodes, self.slurm_drain_cap_share, self.slurm_drain_cap_unknown_share,
                        self.slurm_drain_cap_window, self.slurm_drain_cap_textfile)
