"""The simulator: replays real cluster traces through the unchanged scheduler."""
