"""HyperSpy both ways: a File as a (lazy) Signal2D with calibrated axes,
and a signal's axes and microscope metadata as a qem calibration file
(schema-2 quantities) plus source facts."""
import math
import os

_SCAN_TO_ANGSTROM = {"m": 1e10, "um": 1e4, "µm": 1e4, "μm": 1e4, "nm": 10.0, "a": 1.0,
                     "å": 1.0, "angstrom": 1.0, "pm": 0.01}
_DETECTOR = {"mrad": (1.0, "mrad"), "rad": (1000.0, "mrad"), "1/nm": (0.1, "1/angstrom"),
             "nm^-1": (0.1, "1/angstrom"), "1/a": (1.0, "1/angstrom"),
             "1/å": (1.0, "1/angstrom"), "1/angstrom": (1.0, "1/angstrom"),
             "a^-1": (1.0, "1/angstrom"), "å^-1": (1.0, "1/angstrom")}
_ARRAY_NAMES = ("scan_row", "scan_column", "detector_row", "detector_column")


def _text(value):
    return value if isinstance(value, str) and value and value != "<undefined>" else None


def _axes_in_array_order(signal):
    am = signal.axes_manager
    axes = sorted(list(am.navigation_axes) + list(am.signal_axes), key=lambda a: a.index_in_array)
    if len(axes) != 4 or len(am.navigation_axes) != 2 or len(am.signal_axes) != 2:
        raise ValueError("qem saves 4D-STEM signals: two navigation and two signal axes "
                         f"(this one has {len(am.navigation_axes)} and "
                         f"{len(am.signal_axes)})")
    return axes


def _json_safe(value, depth=0):
    """The JSON-representable part of HyperSpy metadata (arrays and objects
    are named, not copied)."""
    if depth > 8:
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v, depth + 1) for v in value[:64]]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else str(value)
    try:
        import numpy as np

        if isinstance(value, np.generic):
            return _json_safe(value.item(), depth)
        if isinstance(value, np.ndarray):
            return {"array_shape": list(value.shape), "dtype": str(value.dtype)}
    except ImportError:
        pass
    return str(value)


def signal_calibration(signal):
    """(calibration file dict or None, source facts dict) for a signal."""
    axes = _axes_in_array_order(signal)
    quantities = {}
    facts_axes = []
    for k, ax in enumerate(axes):
        units = _text(getattr(ax, "units", None))
        scale = float(ax.scale)
        facts_axes.append({"array_axis": _ARRAY_NAMES[k], "name": _text(getattr(ax, "name", None)),
                           "scale": scale, "offset": float(ax.offset), "units": units,
                           "size": int(ax.size)})
        if units is None or not (scale > 0 and math.isfinite(scale)):
            continue
        u = units.strip().lower()
        evidence = f"HyperSpy axis {_text(ax.name) or k}: scale {scale!r} {units}"
        if k < 2 and u in _SCAN_TO_ANGSTROM:
            quantities[("scan_sampling_row", "scan_sampling_column")[k]] = {
                "value": scale * _SCAN_TO_ANGSTROM[u], "unit": "angstrom",
                "provenance": "hyperspy axes_manager", "evidence": evidence}
        elif k >= 2 and u in _DETECTOR:
            factor, unit = _DETECTOR[u]
            quantities[("detector_sampling_row", "detector_sampling_column")[k - 2]] = {
                "value": scale * factor, "unit": unit, "provenance": "hyperspy axes_manager",
                "evidence": evidence}
    detector_units = {q["unit"] for n, q in quantities.items() if n.startswith("detector")}
    if len(detector_units) > 1:  # row and column must agree; keep neither
        for n in ("detector_sampling_row", "detector_sampling_column"):
            quantities.pop(n, None)
    tem = {}
    try:
        tem = signal.metadata.Acquisition_instrument.TEM.as_dictionary()
    except AttributeError:
        pass
    for key, path, unit in (("beam_energy", "electron_source/accelerating_voltage", "kV"),
                            ("convergence_angle", "illumination_system/semi_convergence_angle",
                             "mrad"),
                            ("camera_length", "imaging_system/camera_length", "mm")):
        value = tem.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and \
                math.isfinite(value):
            quantities[path] = {"value": float(value), "unit": unit,
                                "provenance": "hyperspy metadata",
                                "evidence": f"Acquisition_instrument.TEM.{key} = {value!r}"}
    facts = {"family": "hyperspy", "signal_type": _text(getattr(signal, "_signal_type", None)),
             "axes": facts_axes,
             "metadata": _json_safe(signal.metadata.as_dictionary()),
             "calibration_coverage": sorted(quantities) or "none: no axis or microscope "
                                                          "quantity in a unit qem knows"}
    return ({"quantities": quantities} if quantities else None), facts


def file_signal(f, lazy):
    import hyperspy.api as hs
    import numpy as np

    data = f.to_dask() if lazy else np.asarray(f)
    signal = hs.signals.Signal2D(data)
    if lazy:
        signal = signal.as_lazy()
    axes = _axes_in_array_order(signal)
    cal = f.calibration
    steps = [cal.get("scan_step_row"), cal.get("scan_step_column"),
             cal.get("detector_step_row"), cal.get("detector_step_column")]
    for k, ax in enumerate(axes):
        ax.name = _ARRAY_NAMES[k]
        if steps[k]:
            ax.scale = steps[k]["value"]
            ax.units = {"angstrom": "Å", "1/angstrom": "1/Å"}.get(steps[k]["unit"],
                                                                  steps[k]["unit"])
    signal.metadata.General.title = os.path.basename(f.path)
    signal.metadata.General.original_filename = os.path.basename(f.path)
    for key, name in (("voltage", "beam_energy"), ("semiangle", "convergence_angle"),
                      ("camera_length", "camera_length")):
        if cal.get(key):
            signal.metadata.set_item(f"Acquisition_instrument.TEM.{name}", cal[key]["value"])
    return signal
