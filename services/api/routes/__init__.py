"""The API's blueprints, one module per resource, each defining ``blueprint``."""
