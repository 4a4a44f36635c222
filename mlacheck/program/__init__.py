"""Program mode: observe any Python program, and every Python process it starts, with no change to it."""
