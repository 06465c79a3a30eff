"""`taguru evaluate`: an HTTP-only quality harness for sources/search versus budgeted evidence assembly."""
