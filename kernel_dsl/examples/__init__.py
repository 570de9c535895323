"""Small runnable examples (the README demo)."""
