"""How a process gets at the catalog's file: the ``flock`` that takes turns (and says who holds it while another
waits), the snapshot a user's query reads instead of the live file, and the query that Ctrl-C or a time limit stops;
and what the catalog keeps of the rejected input rows (``rejects``: a view over the artifacts' parts, counts kept).
"""
