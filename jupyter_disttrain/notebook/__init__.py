"""The notebook front end: ``%%distrun`` and ``%distrun`` (``magics``), the live view under
the cell (``widgets``, with its progress and sparkline in ``progress`` and a rank's pdb prompt
in ``debug``), what the kernel carries into a job (``kernelenv``) and the values it gets back
(``values``).
"""
