"""``trainguard doctor``: checks of a configuration against the live endpoints it names.

Each check is a small async function that returns ``report.Check`` records (ok / warn / fail, a
message and how to fix it) and never raises; ``report.guarded`` time-boxes it, so a server that
does not answer is a failed check, never a hanging command. The CLI (``cli/doctor.py``) picks the
checks from the settings and prints the table or the JSON.
"""
