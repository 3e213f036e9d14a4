"""Install ccrhost on every node: the controller's version, in a venv, linked
at slurm_ccrhost (the command the Slurm prolog runs). Run it before
deploys/slurm.py.

    pip wheel --wheel-dir ccrhost-wheelhouse .      # once, on the controller, in the checkout
    pyinfra -y INVENTORY deploys/install.py

The wheels travel from the controller (ccrhost_wheelhouse) over SSH, so the
nodes need no network; ccrhost_install_dir (default /usr/local/lib/ccrhost) gets
the venv. A rerun changes nothing; the wheelhouse and every host's data
are checked before any host is touched.
"""

from ccrhost.deploys import install_stage

install_stage()
