"""Pictures of broadcasts: drawings (schedules and traces as message diagrams) and tuning_plots (fits,
tables, accuracy)."""
