"""The config layer: definition files (TOML) parsed into frozen, validated dataclasses — one
module per file type, and the only place TOML is read.

- :mod:`hbtest.config.files` — :func:`load_toml`, ``--set`` overrides;
- :mod:`hbtest.config.sweep` — sweep files (:func:`load_sweep`);
- :mod:`hbtest.config.rig` — rig files (:func:`load_rig`; kinds parse their own tables
  through :mod:`hbtest.rig.registry`);
- :mod:`hbtest.config.chain` — lumped-chain files (:func:`load_chain`);
- :mod:`hbtest.config.campaign` — campaign files (:func:`load_campaign`).

Units: SI inside; a file field carries its unit in its name (``length_mm``,
``youngs_modulus_gpa``, ``frequency_hz``, ``voltage_limit_v``...) and is converted at load.
Every problem is a :class:`~hbtest.errors.ConfigError` naming the file and the dotted key.
``--set dotted.key=value`` overrides (value parsed as a TOML value, bare words as strings)
are applied to the parsed document before validation, so they are checked like the file.
The shared schema pieces (:class:`Section`, :class:`SourceFile`, :class:`BeamSpec`,
:func:`read_beam`, :class:`RigCommon`) live in the leaf module :mod:`hbtest.config.section` and are
re-exported here.
"""

from .campaign import *  # noqa: F401,F403
from .campaign import __all__ as _campaign_all
from .chain import *  # noqa: F401,F403
from .chain import __all__ as _chain_all
from .files import apply_overrides, load_toml, parse_override
from .rig import *  # noqa: F401,F403
from .rig import __all__ as _rig_all
from .section import BeamSpec, RigCommon, Section, SourceFile, read_beam
from .sweep import *  # noqa: F401,F403
from .sweep import __all__ as _sweep_all

__all__ = ["Section", "SourceFile", "BeamSpec", "read_beam", "RigCommon", "load_toml", "apply_overrides", "parse_override",
           *_sweep_all, *_rig_all, *_chain_all, *_campaign_all]
