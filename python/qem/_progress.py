"""Progress reporting for long calls: off by default; ``progress=True``
shows a tqdm bar, a callable is called as ``progress(done, total)``.
Ctrl-C is seen through the same callback in every case."""


class _Bar:
    """A tqdm bar created on the first report (total known only then)."""

    def __init__(self, description, unit):
        self.description = description
        self.unit = unit
        self.bar = None

    def __call__(self, done, total):
        if self.bar is None:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=self.description, unit=self.unit, leave=False)
        elif total != self.bar.total:  # a new phase (opening: the file, then its body)
            self.bar.reset(total=total)
        self.bar.update(done - self.bar.n)

    def close(self):
        if self.bar is not None:
            self.bar.close()


class reporter:
    """``with reporter(progress, "saving", "scans") as callback:`` gives the
    callable to pass to the extension (None when nothing is to be shown)."""

    def __init__(self, progress, description, unit):
        if progress is None or progress is False:
            self.callback = None
        elif progress is True:
            self.callback = _Bar(description, unit)
        elif callable(progress):
            self.callback = progress
        else:
            raise TypeError("progress must be True, False, None or a callable(done, total)")

    def __enter__(self):
        return self.callback

    def __exit__(self, *exc):
        if isinstance(self.callback, _Bar):
            self.callback.close()
        return False
