"""The section of doc/benchmarks.md a Python benchmark driver owns: the
text between its begin and end markers, replaced in place (or appended
under `heading` the first time)."""


def replace_section(path, begin, end, heading, section):
    with open(path) as fh:
        doc = fh.read()
    block = f"{begin}\n{section}{end}"
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):]
    else:
        doc += f"\n## {heading}\n\n" + block + "\n"
    with open(path, "w") as fh:
        fh.write(doc)
