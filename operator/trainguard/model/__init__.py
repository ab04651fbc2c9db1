"""Plain data shared by every stage of the loop. No I/O lives here."""
