"""Report pages: the HTML builder, the plots, where a pipeline's page goes, a run's page and two runs compared."""
