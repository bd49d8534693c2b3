"""Stage 1, configuration: matrix.yaml and the site file → typed, validated objects."""
