"""Acting on advice: ``executor`` (observe, compare, act, verify, report) over named ``steps``,
and the ``watchdog`` that falls back to the scheduler's defaults. ``ports`` names what they
need from the scheduler and the audit store."""
