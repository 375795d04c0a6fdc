/* sinkwatch serve --export writes the runs here; served empty. */
window.SW_STATIC = window.SW_STATIC || null;
