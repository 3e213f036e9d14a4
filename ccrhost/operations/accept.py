"""The acceptance certificate onto the node (deploys/accept.py; issue 50)."""

from __future__ import annotations

from pyinfra import host

from ccrhost.operations.base import DRY, WriteFileCommand, fail, operation


@operation
def certificate(settings, outcome):
    """
    Store the node's acceptance certificate at ``accept_certificate`` whole
    (node/certificate.store_script: a temporary file beside it renamed over
    it), then pass the node where it is certified, or fail it naming the
    stage that stopped it and its codes.

    + settings: the host's validated ``HostSettings``
    + outcome: the node's ``fleet.accept_deploy.NodeOutcome``
    """
    from ccrhost.model.certificate import CERTIFIED
    from ccrhost.node.certificate import document, store_script

    if outcome.certificate is not None:  # --dry lists it as the file and its size
        path, cert = settings.accept_certificate, outcome.certificate
        yield WriteFileCommand(path, len(document(cert).encode()), "644", store_script(path, cert))
    if outcome.state == CERTIFIED or DRY:  # a dry run says what it would run, and fails nothing
        host.log(outcome.message)
    else:
        yield from fail(outcome.message)
