"""Click commands only: parse, call the library, print. No logic lives here."""
