"""Outputs: the terminal text, the HTML memory picture, and the launch files rendered from templates."""
