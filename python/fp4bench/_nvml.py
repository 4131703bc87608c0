"""GPU telemetry through NVML (libnvidia-ml.so.1, loaded with ctypes, optional):
the SM and memory clocks, power, temperature and clock-event reasons after
every sample, as the engine reads them (src/bench/device.c)."""

from __future__ import annotations

import ctypes
from ctypes import byref, c_char, c_uint, c_ulonglong, c_void_p
from dataclasses import dataclass
from typing import Optional


@dataclass
class Sample:
    sm_mhz: float = 0.0
    mem_mhz: float = 0.0
    power_w: float = 0.0
    temp_c: float = 0.0
    reasons: int = 0


class Nvml:
    """One GPU's handle, found by its PCI bus id (as the engine does)."""

    def __init__(self, lib: ctypes.CDLL, dev: c_void_p, driver: str):
        self._lib = lib
        self._dev = dev
        self.driver = driver
        fn = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons = fn or getattr(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None)

    @classmethod
    def open(cls, pci_bus_id: Optional[str]) -> tuple[Optional["Nvml"], str]:
        """(Nvml, "") or (None, why not)."""
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError:
            return None, "NVML not found (libnvidia-ml.so.1)"
        try:
            if lib.nvmlInit_v2() != 0:
                return None, "nvmlInit failed"
            dev = c_void_p()
            if pci_bus_id:
                st = lib.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), byref(dev))
            else:
                st = lib.nvmlDeviceGetHandleByIndex_v2(c_uint(0), byref(dev))
            if st != 0:
                lib.nvmlShutdown()
                return None, "NVML cannot find the CUDA device"
            buf = (c_char * 80)()
            driver = ""
            if lib.nvmlSystemGetDriverVersion(buf, c_uint(80)) == 0:
                driver = buf.value.decode(errors="replace")
            return cls(lib, dev, driver), ""
        except AttributeError:
            return None, "NVML lacks the functions we need"

    def read(self) -> Optional[Sample]:
        v = c_uint(0)
        s = Sample()
        if self._lib.nvmlDeviceGetClockInfo(self._dev, 1, byref(v)) != 0:  # NVML_CLOCK_SM
            return None
        s.sm_mhz = float(v.value)
        if self._lib.nvmlDeviceGetClockInfo(self._dev, 2, byref(v)) == 0:  # NVML_CLOCK_MEM
            s.mem_mhz = float(v.value)
        if self._lib.nvmlDeviceGetPowerUsage(self._dev, byref(v)) == 0:
            s.power_w = v.value / 1000.0
        if self._lib.nvmlDeviceGetTemperature(self._dev, 0, byref(v)) == 0:  # GPU die
            s.temp_c = float(v.value)
        if self._reasons is not None:
            r = c_ulonglong(0)
            if self._reasons(self._dev, byref(r)) == 0:
                s.reasons = int(r.value)
        return s

    def close(self) -> None:
        try:
            self._lib.nvmlShutdown()
        except Exception:
            pass
