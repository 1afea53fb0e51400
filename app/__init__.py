"""lowbit web application: pages, API and the run store. Never imports torch."""
