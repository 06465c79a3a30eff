"""Wire shapes: request specs, response schemas and the renderers of typed store results."""
