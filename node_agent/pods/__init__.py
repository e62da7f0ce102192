"""Pods: Macs cabled together and run as one unit with MLX's distributed engine (mlx.launch)."""
