"""modelc.actors"""
