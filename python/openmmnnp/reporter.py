"""A Simulation reporter that writes the energy of every batch (molecule)."""
from openmm import unit


class BatchEnergyReporter:
    """Writes step, time (ps) and the energy of every batch (kJ/mol) of an NNPForce, as CSV.

        simulation.reporters.append(BatchEnergyReporter("energies.csv", 100, force))

    file            a path or an open file object
    reportInterval  steps between reports
    force           the NNPForce (as added to the System)
    """

    def __init__(self, file, reportInterval, force):
        self._own = isinstance(file, str)
        self._out = open(file, "w") if self._own else file
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
