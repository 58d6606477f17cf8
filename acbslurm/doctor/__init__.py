"""``acbslurm doctor``: check a node's setup and say what is wrong and how to fix it.

One module per area, each with check functions ``Context -> Check``: Slurm's hook lines
and version (``slurmconf``, ``version``), gres.conf against the GPU inventory (``gres``),
the NVIDIA container hook (``nvidia``), the user's rootless Docker (``docker``), the
record and runtime directories (``records``), the report's database or service
(``report``), where hook messages go (``logs``). ``run`` runs them all.
"""

from acbslurm.doctor.result import Check
from acbslurm.doctor.run import format_text, run_doctor

__all__ = ["Check", "format_text", "run_doctor"]
