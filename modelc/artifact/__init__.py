"""modelc.artifact"""
