"""Simulated SCPI instruments over real TCP sockets, with the virtual twin as the plant: a
Keysight 33500B generator (:mod:`.generator`) and an InfiniiVision scope (:mod:`.scope`), written
from their manuals (each module cites the sections), served as LAN instruments serve SCPI on
port 5025 (:mod:`.server`), sharing one plant on the wall clock (:mod:`.plant`).

``hbtest serve --protocol scpi --rig instruments/virtual-cantilever.toml`` serves both on
loopback and prints one line ``generator listening on 127.0.0.1:<port>, scope listening on
127.0.0.1:<port>``; ``instruments/scpi-loopback.toml`` is the matching rig file of kind ``scpi``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .generator import Generator
from .plant import Plant
from .scope import Scope
from .server import ScpiServer

__all__ = ["Bench", "Generator", "Plant", "Scope", "ScpiServer", "open_bench"]


@dataclass
class Bench:
    """Both simulated instruments and their plant; ``with`` starts and stops the servers."""

    plant: Plant
    generator: Generator
    scope: Scope
    generator_server: ScpiServer
    scope_server: ScpiServer

    def start(self) -> Bench:
        self.generator_server.start()
        self.scope_server.start()
        return self

    def stop(self) -> None:
        self.generator_server.stop()
        self.scope_server.stop()

    def __enter__(self) -> Bench:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def open_bench(twin_config, seed: int | None = None, host: str = "127.0.0.1", generator_port: int = 0,
               scope_port: int = 0) -> Bench:
    """The twin of ``twin_config`` (kind "virtual") behind a generator and a scope served on
    ``host`` (ports 0: chosen by the OS). Not started."""
    from ...rig.virtual import VirtualRig

    plant = Plant(VirtualRig(twin_config, seed))
    gen = Generator(plant)
    scope = Scope(plant, gen.sync_phase)
    return Bench(plant, gen, scope, ScpiServer(gen, host, generator_port, "33500B"), ScpiServer(scope, host, scope_port, "InfiniiVision"))
