"""The dashboard at /ui: server-rendered HTML, no front-end build, no JavaScript needed."""
