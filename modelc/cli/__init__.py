"""modelc.cli"""
