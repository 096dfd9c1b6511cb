"""The REST API service: a Flask (APIFlask) app under gunicorn; see docs/rest-api.md."""
