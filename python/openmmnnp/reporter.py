"""A Simulation reporter that writes the energy of every batch (molecule)."""
import numbers
import os

from openmm import unit


class BatchEnergyReporter:
    """Writes step, time (ps) and the energy of every batch (kJ/mol) of an NNPForce, as CSV.

        simulation.reporters.append(BatchEnergyReporter("energies.csv", 100, force))

    file            a path (str, bytes or os.PathLike) or an open file object
    reportInterval  steps between reports (a positive integer)
    force           the NNPForce (as added to the System)
    """

    def __init__(self, file, reportInterval, force):
        self._own = False
        if isinstance(reportInterval, bool) or not isinstance(reportInterval, numbers.Integral) or reportInterval < 1:
            raise ValueError(f"BatchEnergyReporter: reportInterval must be a positive integer, not {reportInterval!r}")
        if isinstance(file, (str, bytes, os.PathLike)):
            try:
                self._out = open(file, "w")
            except OSError as e:
                raise OSError(e.errno, f"BatchEnergyReporter: cannot write {os.fsdecode(file)!r}: {e.strerror}") from e
            self._own = True
        elif hasattr(file, "write"):
            self._out = file
        else:
            raise TypeError(f"BatchEnergyReporter: file must be a path or an open file object, not {type(file).__name__}")
        self._interval = reportInterval
        self._force = force
        self._header = False

    def describeNextReport(self, simulation):
        steps = self._interval - simulation.currentStep % self._interval
        return {"steps": steps, "periodic": None, "include": []}

    def report(self, simulation, state):
        energies = self._force.getBatchEnergies(simulation.context).value_in_unit(unit.kilojoule_per_mole)
        if not self._header:
            names = ",".join(f"E{b} (kJ/mol)" for b in range(len(energies)))
            print(f"#Step,Time (ps),{names}", file=self._out)
            self._header = True
        time = state.getTime().value_in_unit(unit.picosecond)
        print(f"{simulation.currentStep},{time:.6f}," + ",".join(f"{e:.6f}" for e in energies), file=self._out)
        self._out.flush()

    def __del__(self):
        if getattr(self, "_own", False):
            self._out.close()
