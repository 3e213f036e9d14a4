"""Collect every host's stored active results and the versions they ran
under, for `ccrhost baseline calibrate`:

    pyinfra -y INVENTORY deploys/baseline.py
    ccrhost baseline calibrate --from ccrhost-report/baseline --output site.yaml --extends hgx-h100-8x400

Read-only on the nodes; one <host>.json per host under
<verify_report_dir>/baseline/ on the controller (docs/baseline.md).
"""

from ccrhost.deploys import baseline_stage

baseline_stage()
