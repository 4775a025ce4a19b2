"""What a run did, for people and pipelines: the JSON report (record), the terminal summary, the HTML page."""
