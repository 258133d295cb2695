"""Training engines that write run folders: the loop, vectorised seeds, fine-tuning, schedules."""
