"""Virtual campaigns: many sweeps / stability / classical analyses of one base sweep with
varied parameters, one task each on ``dask.distributed``, results in one campaign store.

- :mod:`.cases` — expanding a campaign file into cases (grids, seeded random draws).
- :mod:`.task` — :func:`run_case`, one case on a worker.
- :mod:`.figures` — the figures kept per case, by kind.
- :mod:`.store` — the campaign store (``case`` dimension, written by region by one writer).
- :mod:`.engine` — :func:`run_campaign` (LocalCluster, an existing scheduler, or serial).
- :mod:`.events` — progress events; :mod:`.plot` — figures against the varied parameters.

The campaign file is parsed by :func:`hbtest.config.load_campaign`. Dask is an optional
extra (``pip install -e ".[campaign]"``); without it only ``workers=0`` (serial) runs.
"""

from .cases import Case, case_rig_seed, expand_cases, toml_literal
from .engine import DASK_MISSING, campaign_exit_code, run_campaign
from .events import CampaignFinished, CampaignStarted, CaseFinished
from .figures import FIGURE_INFO, FIGURES
from .plot import MAX_HEATMAP_LEVELS, campaign_figure, campaign_png, default_campaign_png
from .store import CAMPAIGN_SCHEMA_VERSION, CASE_STATUSES, CampaignStore, open_campaign
from .task import run_case

__all__ = [
    "Case", "expand_cases", "toml_literal", "case_rig_seed", "run_case", "run_campaign", "campaign_exit_code", "DASK_MISSING",
    "CampaignStarted", "CaseFinished", "CampaignFinished", "FIGURES", "FIGURE_INFO", "CampaignStore", "open_campaign",
    "CAMPAIGN_SCHEMA_VERSION", "CASE_STATUSES", "campaign_figure", "campaign_png", "default_campaign_png", "MAX_HEATMAP_LEVELS",
]
