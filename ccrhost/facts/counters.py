"""A window of runtime samples (port counters, GPU utilization) from a node."""

from __future__ import annotations

from pyinfra.api import FactBase
from pyinfra.api.exceptions import FactProcessError

from ccrhost import failures
from ccrhost.probes.counters import CountersFormatError, parse_samples, sampler_command


class RuntimeSamples(FactBase):
    """Returns ``[Sample, ...]`` (see :mod:`ccrhost.probes.counters`): ``count`` samples
    ``interval`` seconds apart, taken by one shell loop on the node."""

    default = list

    def command(self, count, interval):
        return sampler_command(count, interval)

    def process(self, output):
        try:
            return parse_samples(output)
        except CountersFormatError as exc:
            failures.record_current(f"cannot read the samples: {exc}")
            raise FactProcessError(f"cannot read the samples: {exc}") from exc
